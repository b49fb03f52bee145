package actors_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/listeners"
	"github.com/messagefoundry/mf/storage"
)

// protoactor logs a message sent to a stopped actor (a dead letter) whole:
// one that carries lane names (keys are often MRNs) or a message's bytes
// must show neither. Such dead letters happen when the graph stops with
// messages in flight.
func TestDeadLettersCarryNoPatientData(t *testing.T) {
	var logs enginetest.LogBuffer
	// protoactor logs only the first few dead letters of each second.
	sys := actor.NewActorSystem(actors.WithZerolog(zerolog.New(&logs)), actor.WithDeadLetterThrottleCount(100))
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	sys.Root.Send(pid, lanes.Ingested{Lanes: []string{"lab/MRN0042"}, Newest: []int64{7}})
	submit := listeners.Submit{Msg: storage.NewMessage{Inbound: "adt_in", ControlID: "C1",
		Payload: []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|C1|P|2.5\rPID|1||MRN0042||DOE^JANE\r")}}
	sys.Root.Send(pid, submit)
	sys.Root.Send(pid, listeners.SubmitGroup{Submits: []listeners.Submit{submit, submit}})
	enginetest.WaitFor(t, "the dead letters to be logged", 10*time.Second, func() bool {
		return strings.Count(logs.String(), "DeadLetter") >= 3
	})
	got := logs.String()
	for _, phi := range []string{"MRN0042", "DOE", "TVNI"} { // TVNI: "MSH" in base64
		if strings.Contains(got, phi) {
			t.Fatalf("a dead letter's log line carries %q:\n%s", phi, got)
		}
	}
	if !strings.Contains(got, `"message.lanes":1`) || !strings.Contains(got, `"message.control_id":"C1"`) ||
		!strings.Contains(got, `"message.messages":2`) {
		t.Fatalf("the dead letters' lines do not say what they were:\n%s", got)
	}
}

// protoactor logs an actor's panic itself ("[ACTOR] Recovering"), with the
// panic's value whole: one that quotes a message's field (a panic of a
// library given a value it refused, an error that wraps a destination's
// words) carried it into the log, past the lane manager's own line, which
// names such a value by its type. The runtime's own errors (an index out
// of range, a nil map) carry no data, and keep their text: they say where
// the bug is.
func TestAPanicsValueIsLoggedByItsTypeUnlessARuntimeError(t *testing.T) {
	var logs enginetest.LogBuffer
	sys := actor.NewActorSystem(actors.WithZerolog(zerolog.New(&logs)))
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case string:
			panic(fmt.Errorf("a value the library refused: %s", m))
		case int:
			var lanes []string
			_ = lanes[m] // index out of range
		}
	}))
	sys.Root.Send(pid, "PID|1||SECRETMRN4711")
	enginetest.WaitFor(t, "the panic to be logged", 10*time.Second, func() bool {
		return strings.Count(logs.String(), "Recovering") >= 1
	})
	sys.Root.Send(pid, 3)
	enginetest.WaitFor(t, "the runtime error to be logged", 10*time.Second, func() bool {
		return strings.Count(logs.String(), "Recovering") >= 2
	})
	got := logs.String()
	if strings.Contains(got, "SECRETMRN4711") || !strings.Contains(got, `"reason":"*fmt.wrapError"`) &&
		!strings.Contains(got, `"reason":"*errors.errorString"`) {
		t.Fatalf("the panic's value is not logged by its type alone:\n%s", got)
	}
	if !strings.Contains(got, "index out of range [3] with length 0") {
		t.Fatalf("the runtime error's text is not logged:\n%s", got)
	}
}

// A stop that reaches an actor already gone (a lane that ended itself idle
// as its manager stopped) is not logged: nothing was lost. Any other dead
// letter still is.
func TestAStaleStopIsNoDeadLetterLine(t *testing.T) {
	var logs enginetest.LogBuffer
	sys := actor.NewActorSystem(actors.WithZerolog(zerolog.New(&logs)), actor.WithDeadLetterThrottleCount(100))
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	sys.Root.Stop(pid)
	sys.Root.Send(pid, lanes.Ingested{Lanes: []string{"lab/1"}, Newest: []int64{7}})
	enginetest.WaitFor(t, "the other dead letter to be logged", 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "DeadLetter")
	})
	if n := strings.Count(logs.String(), "DeadLetter"); n != 1 {
		t.Fatalf("%d dead letter lines; want 1 (the Ingested, not the stop):\n%s", n, logs.String())
	}
}

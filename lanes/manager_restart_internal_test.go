package lanes

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
)

// panickingLog panics, once armed, on the log line that carries marker: a
// bug on the goroutine that logs it.
type panickingLog struct {
	w      *logbuf.Buffer
	armed  atomic.Bool
	marker []byte
}

func (p *panickingLog) Write(b []byte) (int, error) {
	if bytes.Contains(b, p.marker) && p.armed.CompareAndSwap(true, false) {
		panic("injected: a bug in the lane manager")
	}
	return p.w.Write(b)
}

// The lane manager that panics is restarted by the graph's supervisor.
// protoactor hands it Restarting before it stops its lanes, and starts the
// next incarnation once they have stopped. Its Restarting closed the
// destinations' senders, cutting a lane's send in hand (the receiver had
// the message; it was retried as failed, a duplicate), and left its rescan
// timer running for the life of the process. Now the send in hand finishes
// and is recorded, and the old timer ends with its incarnation.
func TestAManagerRestartedAfterAPanicLetsTheSendInHandFinish(t *testing.T) {
	release := make(chan struct{})
	var received atomic.Int64 // the messages read; each answered AA once release is closed
	addr := startReceiver(t, nil, func(*hl7.Message) answer {
		received.Add(1)
		select {
		case <-release:
		case <-t.Context().Done(): // the test failed before it: let the receiver stop
		}
		return answer{}
	}).addr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := emrConfig(t, "type = \"mllp\"\naddress = \""+addr+"\"\ntimeout_seconds = 20\nretry_base_seconds = 30\n")
	st := migratedStore(t, ctx)
	res, err := st.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
		Inbound: "adt_in", ControlID: "C1", Payload: []byte("MSH|^~\\&|A|B|C|D|20261121||ADT^A01|C1|P|2.5.1\rPID|1||P1\r"),
		Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "emr", Lane: fixtureLane}}}}})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	bug := &panickingLog{w: logs, marker: []byte("the outbound is held by an operator")}
	env := &Env{Ctx: ctx, Store: st, Owner: "test#1", Trust: func() bool { return true }, Config: cfg,
		Log: zerolog.New(bug).Level(zerolog.InfoLevel), OnFenced: func(string, error) {}}

	system := actor.NewActorSystem()
	restarted := make(chan struct{}, 1)
	var rescansToTheDead atomic.Int64
	system.EventStream.Subscribe(func(evt any) {
		switch e := evt.(type) {
		case *actor.SupervisorEvent: // published as the restart is made
			if e.Directive == actor.RestartDirective {
				select {
				case restarted <- struct{}{}:
				default:
				}
			}
		case *actor.DeadLetterEvent:
			if _, ok := e.Message.(rescan); ok {
				rescansToTheDead.Add(1)
			}
		}
	})
	// As the graph spawns it: under the graph's supervisor strategy.
	var manager atomic.Pointer[actor.PID]
	parent := system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Started); ok {
			manager.Store(c.Spawn(NewManager(env)))
		}
	}, actor.WithSupervisor(actor.NewExponentialBackoffStrategy(time.Minute, 500*time.Millisecond))))

	waitUntil(t, "the lane's send to reach the receiver", 10*time.Second, func() bool { return received.Load() == 1 })
	bug.armed.Store(true)
	system.Root.Send(manager.Load(), HoldChanged{Outbound: "emr", Held: true}) // the manager panics on it
	select {
	case <-restarted:
	case <-time.After(10 * time.Second):
		t.Fatal("the manager was not restarted within 10 s of its panic")
	}
	// The restart's Restarting runs at once on the manager; the ACK comes
	// after it.
	time.AfterFunc(time.Second, func() { close(release) })
	var row storage.QueueRow
	waitUntil(t, "the send's outcome recorded", 20*time.Second, func() bool {
		d, err := st.MessageRead(ctx, res[0].MessageID)
		if err != nil {
			t.Fatal(err)
		}
		row = d.Queue[0]
		return row.Status != storage.QueueInflight
	})
	if row.Status != storage.QueueDone || row.Attempts != 1 {
		t.Fatalf("the row in hand when the manager panicked: %s after %d attempts, last error %q; want done at its first", row.Status, row.Attempts, row.LastError)
	}

	if err := system.Root.StopFuture(parent).Wait(); err != nil {
		t.Fatal(err)
	}
	// A rescan already sent as the timer was cancelled may still come to
	// the dead PID; a timer left running sends one every RescanInterval.
	<-time.After(3 * RescanInterval)
	if n := rescansToTheDead.Load(); n > 1 {
		t.Fatalf("%d rescans sent to the stopped manager in %s: a timer of an incarnation before the restart still runs", n, 3*RescanInterval)
	}
}

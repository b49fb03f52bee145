package listeners

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// A message handed to the ingest actor after it has stopped is a dead
// letter: its sender is told so (ErrShuttingDown, an AE) as soon as the actor
// has stopped, instead of waiting for an answer that never comes (it waited
// out the listener's Grace, 5 s, and held up a clean switchover by as much).
// An answer already given still wins.
func TestASubmitAfterTheIngestActorStoppedIsAnswered(t *testing.T) {
	sys := actor.NewActorSystem()
	env := &Env{Ctx: context.Background(), Log: zerolog.Nop(), System: sys}
	pid := sys.Root.Spawn(NewIngest(env))
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}

	late := make(chan Result, 1)
	sys.Root.Send(pid, Submit{Reply: late})
	got := make(chan Result, 1)
	go func() {
		r, _ := env.await(late, nil)
		got <- r
	}()
	select {
	case r := <-got:
		if !errors.Is(r.Err, ErrShuttingDown) {
			t.Fatalf("a Submit after the stop was answered %+v; want ErrShuttingDown", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Submit after the ingest actor stopped was never answered")
	}

	answered := make(chan Result, 1)
	answered <- Result{MessageID: 7}
	if r, ok := env.await(answered, nil); !ok || r.Err != nil || r.MessageID != 7 {
		t.Fatalf("an answer given before the stop: %+v, %v; want message 7", r, ok)
	}
}

// A message whose value the database refuses fails neither the others of its
// batch nor, sent again, every batch it comes in: the others are stored, and
// it is kept as rejected (its bytes only) and answered refused (AR). Before,
// every sender of the batch got AE, and the refused one's sender resent it
// forever. The refusal here is SQLite's own CHECK on the status column.
func TestARefusedMessageFailsNoOtherOfItsBatch(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	in := &Ingest{env: &Env{Ctx: ctx, Store: st, Log: zerolog.New(&logs)}}
	good := func(key string) storage.NewMessage {
		return storage.NewMessage{Inbound: "in", ControlID: key, MessageType: "ADT^A01", Payload: []byte("MSH|" + key),
			Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "lab", Lane: "lab/" + key}}}
	}
	bad := good("DOE^JANE")
	bad.Status = "bogus"

	results, touched, err := in.store([]storage.NewMessage{good("P1"), bad, good("P2")})
	if err != nil {
		t.Fatalf("store: %v; want no batch error", err)
	}
	for _, i := range []int{0, 2} {
		if results[i].Err != nil || results[i].MessageID == 0 {
			t.Fatalf("message %d of the batch: %+v; want stored", i, results[i])
		}
	}
	if !errors.Is(results[1].Err, storage.ErrRefused) || results[1].MessageID == 0 {
		t.Fatalf("the refused message: %+v; want ErrRefused and the id of its bytes kept", results[1])
	}
	if strings.Join(touched.Lanes, ",") != "lab/P1,lab/P2" {
		t.Fatalf("lanes told of: %v; want lab/P1,lab/P2", touched.Lanes)
	}
	d, err := st.MessageRead(ctx, results[1].MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Message.Status != storage.MessageRejected || string(d.Message.Payload) != "MSH|DOE^JANE" || len(d.Queue) != 0 ||
		!strings.Contains(d.Message.Error, "refused") {
		t.Fatalf("kept as %+v with %d queue rows; want rejected, its bytes, no delivery", d.Message, len(d.Queue))
	}
	if strings.Contains(logs.String(), "DOE") {
		t.Fatalf("a log line carries the message's contents: %s", logs.String())
	}
}

package listeners

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
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

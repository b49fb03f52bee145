package actors_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// countedLeader is a leadership actor that reports itself elected once,
// counts its starts, and says, when it stops (where an elector resigns the
// lease), whether the graph's port was still open.
type countedLeader struct {
	started  *atomic.Int32
	stopping chan<- bool
	listen   string
	hello    chan<- scriptedRef
}

func (s *countedLeader) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if s.started.Add(1) == 1 {
			ctx.Send(ctx.Parent(), leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "elected", Ended: make(chan struct{})})
		}
		s.hello <- scriptedRef{ctx.ActorSystem(), ctx.Self()}
	case leadership.ConfigChanged:
		ctx.Send(ctx.Parent(), m)
	case *actor.Stopping:
		s.stopping <- open(s.listen)
	}
}

// A panic in root (here a reload that panics) stops the graph before the
// leadership actor stops, fails the engine, and starts no second
// leadership actor. Before, root's supervisor restarted it: it stopped the
// graph and the elector at once, so the elector resigned the lease while
// the graph still drained (a standby could lead beside it); the children's
// end was then reported as their own repeated panics (the engine failed
// with "the graph was stopped after repeated panics"), and the restarted
// root spawned a new elector, which could win the lease with no graph.
func TestAPanicOfRootStopsTheGraphBeforeTheLeaseIsGivenUp(t *testing.T) {
	listen := enginetest.FreeAddr(t)
	cfg, st := parsedGraphConfig(t, listen), migratedStore(t)
	logs := &enginetest.LogBuffer{}
	var started atomic.Int32
	stopping, hello := make(chan bool, 4), make(chan scriptedRef, 4)
	eng, err := actors.Start(actors.Options{
		Config: cfg, Store: st, Log: zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), logs)), NodeID: "n1",
		Leadership: actor.PropsFromProducer(func() actor.Actor {
			return &countedLeader{started: &started, stopping: stopping, listen: listen, hello: hello}
		}),
		Trust:  leadership.AlwaysTrusted(),
		Reload: func() (*config.Config, error) { panic("a bug in reload") },
	})
	if err != nil {
		t.Fatal(err)
	}
	lead := <-hello
	enginetest.WaitFor(t, "the graph's port open", 10*time.Second, func() bool { return open(listen) })
	lead.system.Root.Send(lead.pid, leadership.ConfigChanged{Version: 2})
	select {
	case stillOpen := <-stopping:
		if stillOpen {
			t.Error("the leadership actor stopped (where an elector resigns the lease) while the graph's port was still open")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the leadership actor did not stop after root panicked")
	}
	select {
	case err := <-eng.Failed():
		if !strings.Contains(err.Error(), "root actor panicked") {
			t.Errorf("the engine failed with %q; want it to say that root panicked", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the engine did not fail after root panicked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := eng.Stop(ctx); err != nil {
		t.Error(err)
	}
	if n := started.Load(); n != 1 {
		t.Errorf("%d leadership actors started; want 1 (a second could win the lease with no graph)", n)
	}
	for _, wrong := range []string{"leadership actor panicked too often", "graph panicked too often"} {
		if strings.Contains(logs.String(), wrong) {
			t.Errorf("a child's end was reported as its own repeated panics: %q", wrong)
		}
	}
}

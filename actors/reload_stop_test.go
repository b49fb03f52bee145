package actors_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// A stop that comes while a reload drains the old graph (SIGTERM during a
// reload) does not start the reloaded graph. Started, it opened the
// inbound's port again, to partners the load balancer sent back to it, and
// let its lanes claim, only to be drained in turn: the stop lasted up to
// two drains, which can outlast what mf run waits for it (the drain
// timeout and 30 s); then the node exited non-zero without resigning its
// lease, and a standby waited for the lease to expire.
func TestAStopDuringAReloadStartsNoGraph(t *testing.T) {
	dest := startHangingDestination(t)
	listen := enginetest.FreeAddr(t)
	cfg := slowOutbound(t, "", listen, dest.URL)
	st := migratedStore(t)
	logs := &enginetest.LogBuffer{}
	hello, got := make(chan scriptedRef, 1), make(chan any, 16)
	eng, err := actors.Start(actors.Options{
		Config: cfg, Store: st, Log: zerolog.New(logs), NodeID: "n1",
		Leadership:   actor.PropsFromProducer(func() actor.Actor { return &scripted{hello: hello, got: got} }),
		Trust:        leadership.AlwaysTrusted(),
		Reload:       func() (*config.Config, error) { return cfg, nil },
		DrainTimeout: time.Second, // shorter than the send in hand
	})
	if err != nil {
		t.Fatal(err)
	}
	lead := <-hello
	tell := func(m any) { lead.system.Root.Send(lead.pid, m) }
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()

	tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("T1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("ingest answered %s", ack.Code)
	}
	select {
	case <-dest.inHand:
	case <-time.After(10 * time.Second):
		t.Fatal("the message never reached the destination")
	}
	tell(leadership.ConfigChanged{Version: 2})
	// The listeners are drained first: root is in the reload's drain now.
	enginetest.WaitFor(t, "the reload's drain to close the port", 5*time.Second, func() bool { return !open(listen) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "graph started"); n != 1 {
		t.Fatalf("the graph was started %d times; want once (a stop came during the reload's drain)", n)
	}
}

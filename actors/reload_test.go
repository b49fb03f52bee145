package actors_test

import (
	"context"
	"fmt"
	"path/filepath"
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
	"github.com/messagefoundry/mf/storage/sqlite"
)

// A reload whose drain runs out abandons the send in hand; the old graph's
// lane then fails its write on the cancelled context. That is a report from
// a graph already stopped: it must neither stop the reloaded graph, which
// runs under the same term, nor tell the leadership actor that this node was
// fenced (a single node would then never lead again until restarted).
func TestAnAbandonedDrainDoesNotFenceTheReloadedGraph(t *testing.T) {
	dest := startHangingDestination(t)
	listen := enginetest.FreeAddr(t)
	text := fmt.Sprintf(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = %q

[[outbound]]
name = "slow"
type = "http"
url = %q
timeout_seconds = 50

[[route]]
from = "adt_in"
to = ["slow"]
`, listen, dest.URL)
	cfg, err := config.Parse([]byte(text), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan any, 16)
	hello := make(chan scriptedRef, 1)
	logs := &enginetest.LogBuffer{}
	eng, err := actors.Start(actors.Options{
		Config: cfg, Store: st, Log: zerolog.New(logs), NodeID: "n1",
		Leadership: actor.PropsFromProducer(func() actor.Actor { return &scripted{hello: hello, got: got} }),
		Trust:      leadership.AlwaysTrusted(),
		Reload:     func() (*config.Config, error) { return cfg, nil },
		// Shorter than the send in hand, which lasts up to 50 s.
		DrainTimeout: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := eng.Stop(ctx); err != nil {
			t.Error(err)
		}
		st.Close()
	})
	lead := <-hello
	tell := func(m any) { lead.system.Root.Send(lead.pid, m) }
	confirmed := func(version int64) {
		t.Helper()
		select {
		case m := <-got:
			if m != (leadership.ConfigLoaded{Version: version}) {
				t.Fatalf("the leadership actor got %#v; want ConfigLoaded{%d}", m, version)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the reload to version %d was not confirmed", version)
		}
	}

	tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("S1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("ingest answered %s", ack.Code)
	}
	select {
	case <-dest.inHand:
	case <-time.After(10 * time.Second):
		t.Fatal("the message never reached the destination")
	}

	tell(leadership.ConfigChanged{Version: 2})
	confirmed(2)
	enginetest.WaitFor(t, "the send in hand to be abandoned", 5*time.Second, dest.abandoned.Load)
	// Whatever the old graph reported on its way out was queued at root
	// before the reload ended; a second reload is answered after it.
	tell(leadership.ConfigChanged{Version: 3})
	confirmed(3)
	if !eng.Status().Leader {
		t.Fatal("this node no longer leads after the reloads")
	}
	enginetest.WaitFor(t, "the reloaded graph's port to open", 5*time.Second, func() bool { return open(listen) })
}

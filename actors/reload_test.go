package actors_test

import (
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// A reload whose drain runs out abandons the send in hand; the old graph's
// lane then fails its write on the cancelled context. That is a report from
// a graph already stopped: it must neither stop the reloaded graph, which
// runs under the same term, nor tell the leadership actor that this node was
// fenced (a single node would then never lead again until restarted).
func TestAnAbandonedDrainDoesNotFenceTheReloadedGraph(t *testing.T) {
	dest := startHangingDestination(t)
	listen := enginetest.FreeAddr(t)
	cfg := slowOutbound(t, "", listen, dest.URL)
	e := startScripted(t, cfg, func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) { return cfg, nil }
		// Shorter than the send in hand, which lasts up to 50 s.
		o.DrainTimeout = 500 * time.Millisecond
	})
	eng, got, tell := e.eng, e.got, e.tell
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

// A reload whose drain runs out leaves the send it abandoned in flight under
// this process's own row lease. The old graph has stopped by then, so the
// row is as stranded as after a lost lease: the reloaded graph's lane must
// deliver it again at once, not wait out the row lease (lease_ttl_seconds,
// 60 s here), holding the lane behind it that long.
func TestAReloadRecoversTheDeliveryItsDrainAbandoned(t *testing.T) {
	dest := startHangingDestination(t)
	listen := enginetest.FreeAddr(t)
	cfg := slowOutbound(t, "", listen, dest.URL)
	e := startScripted(t, cfg, func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) { return cfg, nil }
		o.DrainTimeout = 500 * time.Millisecond // shorter than the send in hand
	})

	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("D1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("ingest answered %s", ack.Code)
	}
	select {
	case <-dest.inHand:
	case <-time.After(10 * time.Second):
		t.Fatal("the message never reached the destination")
	}
	e.tell(leadership.ConfigChanged{Version: 2})
	select {
	case m := <-e.got:
		if m != (leadership.ConfigLoaded{Version: 2}) {
			t.Fatalf("the leadership actor got %#v; want ConfigLoaded{2}", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reload was not confirmed")
	}
	enginetest.WaitFor(t, "the send in hand to be abandoned", 5*time.Second, dest.abandoned.Load)
	dest.Release() // it answers the next send at once
	select {
	case <-dest.inHand:
	case <-time.After(15 * time.Second):
		t.Fatal("the delivery the reload's drain abandoned was not made again within 15 s of the reload (its row lease is 60 s)")
	}
}

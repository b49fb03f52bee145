package actors_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// unrenewable makes lease renewals hang until their deadline and fail, as a
// database that stopped answering would.
type unrenewable struct {
	storage.Store
	fail atomic.Bool
}

func (u *unrenewable) LeaseAttemptRenew(ctx context.Context, p storage.LeaseAttemptRenewParams) (storage.Lease, error) {
	if u.fail.Load() {
		<-ctx.Done()
		return storage.Lease{}, errors.New("injected: database unreachable")
	}
	return u.Store.LeaseAttemptRenew(ctx, p)
}

// hangingDestination is an HTTP peer that holds every request until the
// sender gives up on it (or the test releases it, or ends), and says when it
// has one in hand and when that one was abandoned.
type hangingDestination struct {
	*httptest.Server
	inHand    chan struct{}
	abandoned atomic.Bool
	release   chan struct{}
	released  sync.Once
}

func startHangingDestination(t *testing.T) *hangingDestination {
	d := &hangingDestination{inHand: make(chan struct{}, 16), release: make(chan struct{})}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read to the end: only then does the server watch the connection
		// and cancel r.Context() when the sender hangs up.
		_, _ = io.ReadAll(r.Body)
		d.inHand <- struct{}{}
		select {
		case <-r.Context().Done():
			d.abandoned.Store(true)
		case <-d.release:
		}
	}))
	t.Cleanup(func() {
		d.Release()
		d.Close()
	})
	return d
}

// Release answers every request held, and every later one at once: 200.
func (d *hangingDestination) Release() { d.released.Do(func() { close(d.release) }) }

// clusterNode is one clustered engine on PostgreSQL with the real elector,
// at timings short enough for a test (fence 0.3 s, lease 0.6 s), whose
// outbound is slower than the lease: a send may last 50 s.
type clusterNode struct {
	eng    *actors.Engine
	store  *unrenewable
	admin  storage.Store
	listen string
	logs   *enginetest.LogBuffer
	dest   *hangingDestination
	// stopped is set by a test that stops the engine itself.
	stopped atomic.Bool
}

func startClusterNode(t *testing.T) *clusterNode {
	t.Helper()
	url := pgtest.NewSchema(t)
	n := &clusterNode{listen: enginetest.FreeAddr(t), logs: &enginetest.LogBuffer{}, dest: startHangingDestination(t)}
	cfg := slowOutbound(t, fmt.Sprintf(`
[store]
backend = "postgres"
url = %q
pool_size = 4
lease_ttl_seconds = 60

[cluster]
enabled = true
node_id = "n1"
heartbeat_seconds = 0.2
leader_fence_timeout_seconds = 1
leader_lease_ttl_seconds = 1.5
node_timeout_seconds = 1.5
`, url), n.listen, n.dest.URL)
	open := func() *postgres.Store {
		s, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	pg := open()
	if err := pg.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.admin = open()
	n.store = &unrenewable{Store: pg}
	trust := leadership.NewTrust()
	log := zerolog.New(n.logs).With().Timestamp().Logger()
	var err error
	n.eng, err = actors.Start(actors.Options{
		Config: cfg, Store: n.store, Log: log, NodeID: "n1", Trust: trust,
		Leadership: leadership.NewElector(leadership.ElectorOptions{
			Store: n.store, Cluster: cfg.Cluster, NodeID: "n1", Trust: trust, Log: log,
		}),
		Reload:       func() (*config.Config, error) { return cfg, nil },
		DrainTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.logs.String())
		}
		if n.stopped.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := n.eng.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return n
}

// sendInHand makes the leader take a message into a send that does not end
// by itself.
func (n *clusterNode) sendInHand(t *testing.T) {
	t.Helper()
	enginetest.WaitFor(t, "this node to lead", 10*time.Second, func() bool { return n.eng.Status().Leader })
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(n.listen) })
	if ack := enginetest.Dial(t, n.listen).Send(enginetest.ADT("D1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("ingest answered %s", ack.Code)
	}
	select {
	case <-n.dest.inHand:
	case <-time.After(10 * time.Second):
		t.Fatal("the message never reached the destination")
	}
}

// loseLeadershipWhileDraining: with a send in hand, start a drain (drain),
// wait until the listener has closed (the drain is under way, the send still
// in hand), then let the database stop answering, so that the elector fences
// this node. The send in hand must then be abandoned at once, as on any loss:
// this node no longer leads, and a standby may take over, and send that
// message and the ones behind it, one lease TTL later. It must not run on
// for the rest of the drain (here up to 50 s).
//
// It returns the term the node led: not always 1, as an election whose
// answer comes after its deadline (a loaded machine) has taken a term the
// node retries past.
func loseLeadershipWhileDraining(t *testing.T, n *clusterNode, drain func()) int64 {
	t.Helper()
	n.sendInHand(t)
	term := n.eng.Status().Fence.Term
	drain()
	enginetest.WaitFor(t, "the listener to close (the drain under way)", 10*time.Second, func() bool { return !open(n.listen) })
	n.store.fail.Store(true)
	enginetest.WaitFor(t, "the elector to fence this node", 5*time.Second, func() bool {
		return strings.Contains(n.logs.String(), "leadership lost")
	})
	enginetest.WaitFor(t, "the send in hand to be abandoned after the fence", 5*time.Second, n.dest.abandoned.Load)
	return term
}

// A leader fenced in the middle of a reload's drain abandons the send in
// hand, and does not start the reloaded graph under the term it lost.
func TestFenceDuringReloadDrainAbandonsTheSendInHand(t *testing.T) {
	t.Parallel()
	n := startClusterNode(t)
	term := loseLeadershipWhileDraining(t, n, func() {
		if _, err := n.admin.ConfigVersionBump(context.Background(), storage.ConfigVersionBumpParams{}); err != nil {
			t.Fatal(err)
		}
	})
	// The reload ends; the lost term's graph must not start again.
	enginetest.WaitFor(t, "the reload to end", 10*time.Second, func() bool {
		return strings.Contains(n.logs.String(), "config reloaded")
	})
	starts := 0
	for _, line := range strings.Split(n.logs.String(), "\n") {
		if strings.Contains(line, "graph started") && strings.Contains(line, fmt.Sprintf(`"term":%d,`, term)) {
			starts++
		}
	}
	if starts != 1 {
		t.Fatalf("the graph of term %d started %d times; want once, before the reload (its term was lost during the drain)", term, starts)
	}
}

// A leader fenced in the middle of a clean stop's drain abandons the send in
// hand.
func TestFenceDuringStopDrainAbandonsTheSendInHand(t *testing.T) {
	t.Parallel()
	n := startClusterNode(t)
	stopped := make(chan error, 1)
	loseLeadershipWhileDraining(t, n, func() {
		n.stopped.Store(true)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			stopped <- n.eng.Stop(ctx)
		}()
	})
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the engine did not stop after the fence")
	}
}

// A clean stop (SIGTERM) of a primary with a delivery in hand drains in the
// order of reference 002: it stops taking work (the listener closes), lets
// the delivery finish while it still holds, and renews, the lease, so that
// no standby can be elected and send that message or the ones behind it;
// only then does it resign the lease and leave a tombstone.
func TestACleanStopHoldsTheLeaseUntilTheDeliveryInHandIsDone(t *testing.T) {
	t.Parallel()
	n := startClusterNode(t)
	n.sendInHand(t)
	bg := context.Background()
	before, err := n.admin.LeaseRead(bg)
	if err != nil || before.Owner != "n1" {
		t.Fatalf("lease before the stop: %+v, %v", before, err)
	}
	n.stopped.Store(true)
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
		defer cancel()
		stopped <- n.eng.Stop(ctx)
	}()
	enginetest.WaitFor(t, "the listener to close (the drain under way)", 10*time.Second, func() bool { return !open(n.listen) })
	// Renewed until a lease TTL (0.6 s) past the expiry it had when the
	// stop began: held, and kept alive, while the delivery is in hand.
	enginetest.WaitFor(t, "the lease to be renewed during the drain", 5*time.Second, func() bool {
		l, err := n.admin.LeaseRead(bg)
		if err != nil || l.Owner != "n1" || l.Term != before.Term || l.Remaining() <= 0 {
			t.Fatalf("lease during the drain: %+v, %v; want n1's term %d, live", l, err, before.Term)
		}
		return l.ExpiresAt.After(before.ExpiresAt.Add(600 * time.Millisecond))
	})
	if n.dest.abandoned.Load() {
		t.Fatal("the drain abandoned the delivery in hand")
	}
	n.dest.Release()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the engine did not stop once the delivery in hand was done")
	}
	if n.dest.abandoned.Load() {
		t.Fatal("the delivery in hand was abandoned")
	}
	if lanes, err := n.admin.QueueLanes(bg, storage.QueueLanesParams{}); err != nil || len(lanes) != 0 {
		t.Fatalf("lanes with work after the drain: %+v, %v; want the delivery recorded done", lanes, err)
	}
	l, err := n.admin.LeaseRead(bg)
	if err != nil || l.Owner != "n1" || l.Remaining() > 0 {
		t.Fatalf("lease after the stop: %+v, %v; want n1's resigned", l, err)
	}
	nodes, err := n.admin.NodeList(bg)
	if err != nil || len(nodes.Nodes) != 1 || nodes.Nodes[0].Status != storage.NodeLeft || nodes.Nodes[0].IsLeader {
		t.Fatalf("nodes after the stop: %+v, %v; want n1 left", nodes, err)
	}
}

func storeErrors(op string) uint64 {
	return metrics.GetOrCreateCounter(fmt.Sprintf(`mf_store_errors_total{op=%q}`, op)).Get()
}

// A demotion abandons the send in hand, and the lane's write of its outcome
// then fails on the ended term's cancelled context. That is the demotion,
// which mf_leadership_changes_total counts, not a failed store call: counted
// in mf_store_errors_total, every failover raised the alert on database
// errors. (Not parallel: the counter is the process's.)
func TestADemotionIsNotAStoreError(t *testing.T) {
	dest := startHangingDestination(t)
	listen := enginetest.FreeAddr(t)
	cfg := slowOutbound(t, "", listen, dest.URL)
	e := startScripted(t, cfg, func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) { return cfg, nil }
	})
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "elected"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("M1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("ingest answered %s", ack.Code)
	}
	select {
	case <-dest.inHand:
	case <-time.After(10 * time.Second):
		t.Fatal("the message never reached the destination")
	}
	before := storeErrors("retry")
	e.tell(leadership.Changed{Leader: false, Fence: storage.Fence{}, Reason: "renew-lost"})
	// Root answers the reload after it has stopped the graph: the lane has
	// written (or failed to write) the abandoned send's outcome by then.
	e.tell(leadership.ConfigChanged{Version: 2})
	select {
	case <-e.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the reload after the demotion was not confirmed")
	}
	enginetest.WaitFor(t, "the send in hand to be abandoned", 5*time.Second, dest.abandoned.Load)
	if n := storeErrors("retry") - before; n != 0 {
		t.Fatalf(`mf_store_errors_total{op="retry"} rose by %d on a demotion; want 0`, n)
	}
}

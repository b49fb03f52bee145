package actors_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// sweeps tells of every expired-lease sweep and purge a node makes.
type sweeps struct {
	storage.Store
	calls chan string
}

func (s *sweeps) QueueReclaimExpired(ctx context.Context, p storage.QueueReclaimExpiredParams) (int64, error) {
	s.calls <- "reclaim"
	return s.Store.QueueReclaimExpired(ctx, p)
}

func (s *sweeps) MessagePurge(ctx context.Context, p storage.MessagePurgeParams) (storage.PurgeResult, error) {
	s.calls <- "purge"
	return s.Store.MessagePurge(ctx, p)
}

// The leader-gated singletons (reference 000): the expired-lease sweep, the
// retention purge, the polling of a shared directory and the MLLP port run
// only while this node leads, never on a standby, before or after its term.
// Each is also fenced in the store; this shows that a standby does not even
// try. (Not parallel: SetPurgeFirst sets the process's purge delay.)
func TestOnlyTheLeaderSweepsPurgesAndPolls(t *testing.T) {
	actors.SetPurgeFirst(t, 50*time.Millisecond)
	listen, dir := enginetest.FreeAddr(t), t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
[cluster]
reclaim_interval_seconds = 0.05

[[inbound]]
name = "adt_in"
type = "mllp"
listen = %q

[[inbound]]
name = "share"
type = "file"
directory = %q
poll_interval_seconds = 0.05
settle_seconds = 0

[[outbound]]
name = "out"
type = "file"
directory = %q

[[route]]
from = "adt_in"
to = ["out"]
`, listen, dir, filepath.Join(t.TempDir(), "out"))), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	st := &sweeps{calls: make(chan string, 1024)}
	e := startScripted(t, cfg, func(o *actors.Options) {
		st.Store = o.Store
		o.Store = st
		o.Reload = func() (*config.Config, error) { return cfg, nil }
	})
	drop := func(name string) string {
		return enginetest.WriteFile(t, dir, name, []byte(enginetest.ADT(name, "P1")))
	}
	unread := func(path string) bool {
		_, err := os.Stat(path)
		return err == nil
	}
	// standby checks, over a window of 20 sweep intervals, that a node that
	// does not lead neither sweeps nor purges, nor reads the file at path,
	// nor opens its port.
	standby := func(when, path string) {
		t.Helper()
		select {
		case c := <-st.calls:
			t.Fatalf("%s: the node ran a %s", when, c)
		case <-time.After(20 * cfg.Cluster.ReclaimInterval()):
		}
		if !unread(path) || open(listen) || e.eng.Status().Leader {
			t.Fatalf("%s: file %s unread %v, port open %v, status %+v", when, path, unread(path), open(listen), e.eng.Status())
		}
	}

	before := drop("before.hl7")
	standby("before it leads", before)

	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "elected"})
	seen := map[string]bool{}
	enginetest.WaitFor(t, "the leader to sweep, purge, read the shared directory and open its port", 5*time.Second, func() bool {
		for len(st.calls) > 0 {
			seen[<-st.calls] = true
		}
		return seen["reclaim"] && seen["purge"] && !unread(before) && open(listen)
	})

	e.tell(leadership.Changed{Leader: false, Fence: storage.Fence{}, Reason: "renew-lost"})
	// Root handles a config change only once it has handled the loss: the
	// graph, its sweeper and its pollers have stopped by then.
	e.tell(leadership.ConfigChanged{Version: 2})
	select {
	case <-e.got:
	case <-time.After(10 * time.Second):
		t.Fatal("root did not answer the reload after the loss")
	}
	for len(st.calls) > 0 {
		<-st.calls // made while it led
	}
	standby("after its term", drop("after.hl7"))
}

// settingsUsed records the [store] and [cluster] settings the graph's
// writes carry: the sweep's calls, the purge's retention and the row lease
// of a lane's claims.
type settingsUsed struct {
	storage.Store
	reclaims  chan struct{}
	retention chan time.Duration
	rowLease  chan time.Duration
}

func (s *settingsUsed) QueueReclaimExpired(ctx context.Context, p storage.QueueReclaimExpiredParams) (int64, error) {
	s.reclaims <- struct{}{}
	return s.Store.QueueReclaimExpired(ctx, p)
}

func (s *settingsUsed) MessagePurge(ctx context.Context, p storage.MessagePurgeParams) (storage.PurgeResult, error) {
	s.retention <- p.OlderThan
	return s.Store.MessagePurge(ctx, p)
}

func (s *settingsUsed) QueueClaimNext(ctx context.Context, p storage.QueueClaimNextParams) (storage.QueueClaim, error) {
	s.rowLease <- p.LeaseTTL
	return s.Store.QueueClaimNext(ctx, p)
}

// A reload applies the graph's sections only; [store] and [cluster] stay as
// the node started (a reloaded file that changes them is named at WARN as
// not in force: restart the node to apply them). So the graph restarted on
// the reloaded file still sweeps, purges and leases rows as the node
// started: the reloaded reclaim_interval_seconds, retention_days and
// lease_ttl_seconds used to be in force at once, behind that WARN.
// (Not parallel: SetPurgeFirst.)
func TestAReloadKeepsTheStoreAndClusterSettingsTheNodeStartedWith(t *testing.T) {
	actors.SetPurgeFirst(t, 50*time.Millisecond)
	listen, out := enginetest.FreeAddr(t), filepath.Join(t.TempDir(), "out")
	parse := func(head string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(head+fmt.Sprintf(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = %q

[[outbound]]
name = "out"
type = "file"
directory = %q

[[route]]
from = "adt_in"
to = ["out"]
`, listen, out)), "test.toml")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	started := parse("[store]\nretention_days = 7\nlease_ttl_seconds = 60\n[cluster]\nreclaim_interval_seconds = 3600\n")
	reloaded := parse("[store]\nretention_days = 1\nlease_ttl_seconds = 90\n[cluster]\nreclaim_interval_seconds = 0.05\n")
	st := &settingsUsed{reclaims: make(chan struct{}, 1024), retention: make(chan time.Duration, 1024), rowLease: make(chan time.Duration, 1024)}
	e := startScripted(t, started, func(o *actors.Options) {
		st.Store = o.Store
		o.Store = st
		o.Reload = func() (*config.Config, error) { return reloaded, nil }
	})
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(listen) })
	e.tell(leadership.ConfigChanged{Version: 2})
	select {
	case <-e.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the reload was not confirmed")
	}
	// What the first graph did: it has stopped by the confirmation.
	for len(st.retention)+len(st.rowLease)+len(st.reclaims) > 0 {
		select {
		case <-st.retention:
		case <-st.rowLease:
		case <-st.reclaims:
		}
	}
	enginetest.WaitFor(t, "the reloaded graph's port to open", 5*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("R1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("ingest answered %s", ack.Code)
	}
	want := func(what string, got <-chan time.Duration, w time.Duration) {
		t.Helper()
		select {
		case d := <-got:
			if d != w {
				t.Errorf("%s %v after the reload; want %v, the node's start's (the reloaded file's is not in force)", what, d, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", what)
		}
	}
	want("purge retention", st.retention, started.Store.Retention())
	want("row lease of a claim", st.rowLease, started.Store.LeaseTTL())
	select {
	case <-st.reclaims:
		t.Errorf("the reloaded graph swept at the reloaded reclaim_interval_seconds (%v), not the start's (%v)",
			reloaded.Cluster.ReclaimInterval(), started.Cluster.ReclaimInterval())
	case <-time.After(20 * reloaded.Cluster.ReclaimInterval()):
	}
}

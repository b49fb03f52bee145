package actors

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// oldMessages stores n unrouted messages in a fresh SQLite store and makes
// them ten days old, past the default retention (seven days).
func oldMessages(t *testing.T, n int) (*sqlite.Store, []int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mf.db")
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	msgs := make([]storage.NewMessage, n)
	for i := range msgs {
		msgs[i] = storage.NewMessage{Inbound: "adt_in", ControlID: fmt.Sprint("C", i), Payload: []byte("MSH|^~\\&|"), Status: storage.MessageUnrouted}
	}
	res, err := st.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, n)
	for i, r := range res {
		ids[i] = r.MessageID
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE mf_messages SET received_at = received_at - ?`, (10 * 24 * time.Hour).Milliseconds()); err != nil {
		t.Fatal(err)
	}
	return st, ids
}

func startSweeper(t *testing.T, st storage.Store) {
	t.Helper()
	cfg, err := config.Parse(nil, "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithCancel(context.Background())
	spec := &graphSpec{ctx: gctx, cfg: cfg, store: st, log: zerolog.New(zerolog.NewTestWriter(t)),
		onFenced: func(op string, err error) { t.Errorf("%s fenced: %v", op, err) }}
	system := actor.NewActorSystem(WithZerolog(spec.log))
	pid := system.Root.Spawn(newSweeper(spec, spec.log))
	t.Cleanup(func() {
		cancel()
		if err := system.Root.StopFuture(pid).Wait(); err != nil {
			t.Error(err)
		}
		system.Shutdown()
	})
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A backlog past retention larger than one tick's rounds is purged in full
// soon after, not an hour later at the next tick: otherwise a store that
// finishes more rows an hour than one tick deletes is never purged down to
// its retention, and grows without bound.
func TestThePurgeWorksThroughABacklogLargerThanOneTick(t *testing.T) {
	first, limit := purgeFirst, purgeLimit
	purgeFirst, purgeLimit = 10*time.Millisecond, 2
	t.Cleanup(func() { purgeFirst, purgeLimit = first, limit })

	backlog := 60 * purgeLimit // a tick used to make 20 calls at most
	st, ids := oldMessages(t, backlog)
	startSweeper(t, st)
	// Within minutes, not an hour at the next tick: 20 s, then 1 min were
	// too short on a loaded machine (62 of 120 purged; 1 run in 3 with two
	// CPU hogs). Newest first: the purge goes oldest first, so a poll reads
	// one row until the end, where reading all 120 at every poll held the
	// store from the purge, whose pause grows with its calls' time.
	waitFor(t, fmt.Sprintf("all %d messages past retention to be purged", backlog), 3*time.Minute, func() bool {
		for i := len(ids) - 1; i >= 0; i-- {
			if _, err := st.MessageRead(context.Background(), ids[i]); !errors.Is(err, storage.ErrNotFound) {
				return false
			}
		}
		return true
	})
}

// reclaimFailing is a store whose expired-lease sweep fails, as with the
// database away, while fail is set.
type reclaimFailing struct {
	storage.Store
	fail  atomic.Bool
	calls atomic.Int64
}

func (r *reclaimFailing) QueueReclaimExpired(ctx context.Context, p storage.QueueReclaimExpiredParams) (int64, error) {
	r.calls.Add(1)
	if r.fail.Load() {
		return 0, errors.New("injected: connection refused")
	}
	return r.Store.QueueReclaimExpired(ctx, p)
}

// With the database away the sweep fails at every reclaim_interval_seconds:
// each failure was an ERROR line (a single node on PostgreSQL, whose graph
// no fence stops, wrote one every 30 s by default, one a second at 1 s),
// where the lanes, the ingest and the elector log a database away when it
// starts, once a minute and when it ends. The sweeper does too.
func TestTheSweepersFailuresAreLoggedWhenTheyStartAndEnd(t *testing.T) {
	st, _ := oldMessages(t, 0)
	store := &reclaimFailing{Store: st}
	store.fail.Store(true)
	cfg, err := config.Parse([]byte("[cluster]\nreclaim_interval_seconds = 0.02\n"), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	gctx, cancel := context.WithCancel(context.Background())
	spec := &graphSpec{ctx: gctx, cfg: cfg, store: store, log: zerolog.New(&logs),
		onFenced: func(op string, err error) { t.Errorf("%s fenced: %v", op, err) }}
	system := actor.NewActorSystem(WithZerolog(zerolog.Nop()))
	pid := system.Root.Spawn(newSweeper(spec, spec.log))
	defer func() {
		cancel()
		system.Root.StopFuture(pid).Wait()
		system.Shutdown()
	}()
	waitFor(t, "ten failed sweeps", 10*time.Second, func() bool { return store.calls.Load() >= 10 })
	store.fail.Store(false)
	failed := store.calls.Load()
	waitFor(t, "ten sweeps that work", 10*time.Second, func() bool { return store.calls.Load() >= failed+10 })
	got := logs.String()
	if n := strings.Count(got, `"level":"error"`); n != 1 || strings.Count(got, "works again") != 1 {
		t.Fatalf("%d failed sweeps logged in %d ERROR lines, want one, and one line when the sweep works again:\n%s", failed, n, got)
	}
}

// morePurging is a store whose purge calls delete nothing and say there is
// more to look at (More) until left reaches 0, as PostgreSQL's walk for
// messages never queued does while it passes a backlog that still has
// rows.
type morePurging struct {
	storage.Store
	left  atomic.Int64
	calls atomic.Int64
}

func (m *morePurging) MessagePurge(context.Context, storage.MessagePurgeParams) (storage.PurgeResult, error) {
	m.calls.Add(1)
	return storage.PurgeResult{More: m.left.Add(-1) >= 0}, nil
}

// A purge call that deletes less than a full batch but says it stopped at
// its limit with more to look at is followed by another, as a full batch
// is, not by the next hourly tick.
func TestThePurgeCallsAgainWhileACallSaysMore(t *testing.T) {
	first := purgeFirst
	purgeFirst = 10 * time.Millisecond
	t.Cleanup(func() { purgeFirst = first })
	st, _ := oldMessages(t, 0)
	store := &morePurging{Store: st}
	store.left.Store(5)
	startSweeper(t, store)
	waitFor(t, "six purge calls (five said more)", time.Minute, func() bool { return store.calls.Load() >= 6 })
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/messagefoundry/mf/storage"
)

// Lane writes whose callers give up at any moment (queued, handed the lead,
// in a batch) get either their outcome or their context's error, never hang,
// and leave the batcher empty with every batch slot given back; and writes
// that overlap are combined.
func TestLaneBatcherSurvivesCallersGivingUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openMigrated(t, ctx, 4)
	const callers, calls = 16, 150
	var wg sync.WaitGroup
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lane := fmt.Sprint("lab/empty-", g)
			for i := 0; i < calls; i++ {
				cctx, ccancel := context.WithCancel(ctx)
				if i%3 == 0 { // give up at some point while the write is under way
					time.AfterFunc(time.Duration(rand.IntN(300))*time.Microsecond, ccancel)
				}
				_, err := s.QueueClaimNext(cctx, storage.QueueClaimNextParams{Lane: lane, Owner: "solo", LeaseTTL: time.Minute})
				ccancel()
				if !errors.Is(err, storage.ErrNoWork) && !errors.Is(err, context.Canceled) {
					t.Errorf("claim in an empty lane: want ErrNoWork or context.Canceled, got %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	lb := s.lanes
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.inFlight != 0 || len(lb.queue) != 0 {
		t.Fatalf("after every caller returned: %d batches in flight, %d writes queued; want 0 and 0", lb.inFlight, len(lb.queue))
	}
	b, w := lb.batches.Load(), lb.writes.Load()
	t.Logf("%d writes in %d batches", w, b)
	if b >= w {
		t.Fatalf("%d writes took %d batches: none were combined", w, b)
	}
}

// A row that another session keeps locked (an operator's open UPDATE) holds
// up its own lane only. The lane's write that waits for it fails alone once
// it has waited the lock wait, and the other lanes' writes of its batch
// (a delivery recorded with the next claim, a claim) commit with their
// outcomes; the lane's next writes are kept aside, so the other lanes no
// longer wait behind them at all; once the lock goes, the lane's write
// succeeds, and its lane comes back to the shared batches asideFor later.
func TestALockedRowHoldsUpOnlyItsOwnLane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, s, l := leaderStore(t, ctx) // s: three connections, one for each batcher and one spare
	f := storage.Fence{Owner: l.Owner, Term: l.Term}
	storeIn(t, ctx, s, f, "d/locked", "d/a", "d/b", "d/a", "d/a")
	type result struct {
		c   storage.QueueClaim
		err error
	}
	claim := func(lane string, from int64) chan result {
		r := make(chan result, 1)
		go func() {
			c, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: f, Lane: lane, From: from, Owner: "o", LeaseTTL: time.Minute})
			r <- result{c, err}
		}()
		return r
	}
	// got waits for r of a free lane, for at most 10 s.
	got := func(what string, r chan result) storage.QueueClaim {
		t.Helper()
		select {
		case g := <-r:
			if g.err != nil {
				t.Fatalf("%s: %v", what, g.err)
			}
			return g.c
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still waiting after 10s while a row of another lane is locked", what)
		}
		return storage.QueueClaim{}
	}
	a1 := got("lane a's first claim", claim("d/a", 0))

	operator, pid := openSession(t, ctx, s)
	if _, err := operator.Exec(ctx, "UPDATE mf_queue SET last_error = 'looked at by hand' WHERE lane = 'd/locked'"); err != nil {
		t.Fatal(err)
	}

	// One batch of three lanes' writes, the locked lane's claim in the
	// middle: it fails alone, and the two others commit.
	type advanced struct {
		a   storage.QueueAdvanced
		err error
	}
	advance := make(chan advanced, 1)
	var locked, b chan result
	lb := s.lanes
	before := time.Now() // of the locked lane's wait
	oneBatch(t, ctx, lb, func() {
		go func() {
			a, err := s.QueueAdvance(ctx, storage.QueueAdvanceParams{Fence: f, Claim: a1.Claim(), Lane: "d/a", Owner: "o", LeaseTTL: time.Minute})
			advance <- advanced{a, err}
		}()
	}, func() { locked = claim("d/locked", 0) }, func() { b = claim("d/b", 0) })
	var adv advanced
	select {
	case adv = <-advance:
	case <-time.After(10 * time.Second):
		t.Fatal("lane a's delivery record, in a batch with the locked lane's claim: still waiting after 10s")
	}
	if adv.err != nil || !adv.a.Completed || adv.a.Next == nil || adv.a.Next.Row.Lane != "d/a" {
		t.Fatalf("lane a's delivery record and next claim, in a batch with the locked lane's claim: %+v", adv)
	}
	got("lane b's claim, in a batch with the locked lane's", b)
	g := <-locked
	var pgErr *pgconn.PgError
	if !errors.As(g.err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("the locked lane's claim: %v; want it to fail on its lock wait (SQLSTATE 55P03)", g.err)
	}

	// Its next write waits aside: here for longer than the test lets
	// another lane wait, which it need not.
	lb.lockWait, lb.aside.lockWait = time.Minute, time.Minute
	locked = claim("d/locked", 0)
	waitForBlockedBy(t, ctx, s, pid)
	if err := s.QueueComplete(ctx, storage.QueueCompleteParams{Fence: f, Claim: adv.a.Next.Claim(), Lane: "d/a"}); err != nil {
		t.Fatalf("lane a's next delivery record while the locked lane's claim waits aside: %v", err)
	}
	got("lane a's claim while the locked lane's waits aside", claim("d/a", adv.a.Next.Row.ID))
	select {
	case g := <-locked:
		t.Fatalf("the locked lane's claim ended while its row was locked: %+v", g)
	default:
	}

	if err := operator.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if g := <-locked; g.err != nil {
		t.Fatalf("the locked lane's claim once the lock went: %v", g.err)
	}
	w := &laneWrite{lane: "d/locked"}
	if !lb.kept.holds(w, before.Add(asideFor-time.Second)) || lb.kept.holds(w, time.Now().Add(asideFor+2*time.Second)) {
		t.Fatalf("the locked lane is not kept aside until %s after its wait ran out", asideFor)
	}
}

// The lanes and rows set aside are those the write named (its lane, given
// or claimed, the rows it completes or gives back), until asideFor after
// the last write of them ran out of its wait.
func TestAsideSetKeepsAsideWhatTheWriteNamed(t *testing.T) {
	var ls asideSet
	now := time.Now()
	if ls.holds(&laneWrite{lane: "d/x"}, now) {
		t.Fatal("an empty set holds a lane")
	}
	ls.add(&laneWrite{lane: "d/x", complete: &storage.Claim{ID: 7}, giveBack: []storage.Claim{{ID: 8}}}, now)
	ls.add(&laneWrite{of: "d/z", complete: &storage.Claim{ID: 20}}, now)
	for _, w := range []*laneWrite{
		{lane: "d/x"},
		{of: "d/x", complete: &storage.Claim{ID: 9}},
		{complete: &storage.Claim{ID: 7}},
		{giveBack: []storage.Claim{{ID: 8}}},
		{lane: "d/y", complete: &storage.Claim{ID: 7}},
		{lane: "d/z"},
	} {
		if !ls.holds(w, now) {
			t.Errorf("a write of lane %q (%q) completing %v, giving back %v: not kept aside", w.lane, w.of, w.complete, w.giveBack)
		}
	}
	for _, w := range []*laneWrite{{lane: "d/y", complete: &storage.Claim{ID: 9}}, {of: "d/y"}, {}} {
		if ls.holds(w, now) {
			t.Errorf("a write of lane %q (%q) completing %v: kept aside", w.lane, w.of, w.complete)
		}
	}
	ls.add(&laneWrite{lane: "d/x"}, now.Add(5*time.Second)) // ran out again
	later := now.Add(asideFor + 2*time.Second)
	if !ls.holds(&laneWrite{lane: "d/x"}, later) {
		t.Errorf("a lane whose write ran out %s ago is no longer kept aside", asideFor-3*time.Second)
	}
	if ls.holds(&laneWrite{complete: &storage.Claim{ID: 7}}, later) || ls.holds(&laneWrite{lane: "d/z"}, later) {
		t.Errorf("a row or lane whose write ran out %s ago is still kept aside", asideFor+2*time.Second)
	}
}

// oneBatch makes the writes that each of starts begin (in a goroutine of
// its own) go in one batch of lb, in that order: it holds lb's batch slot
// until all of them are queued, then leads the batch.
func oneBatch(t *testing.T, ctx context.Context, lb *laneBatcher, starts ...func()) {
	t.Helper()
	lb.mu.Lock()
	lb.inFlight++ // the batch slot is the test's until it leads
	lb.mu.Unlock()
	for i, start := range starts {
		start()
		until(t, ctx, fmt.Sprintf("%d writes queued", i+1), func() bool {
			lb.mu.Lock()
			defer lb.mu.Unlock()
			return len(lb.queue) == i+1
		})
	}
	go lb.lead()
}

// storeIn stores one routed message for each of lanes, in that order.
func storeIn(t *testing.T, ctx context.Context, s *Store, f storage.Fence, lanes ...string) {
	t.Helper()
	for i, lane := range lanes {
		if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{{
			Inbound: "in", ControlID: fmt.Sprint("M", i), Payload: []byte("MSH|^~\\&|M"), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "d", Lane: lane}},
		}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// claimsInOneBatch claims the head of each of lanes, all in one batch of
// s's lanes, in that order, and returns where each claim's error will come.
func claimsInOneBatch(t *testing.T, ctx context.Context, s *Store, f storage.Fence, lanes ...string) map[string]chan error {
	t.Helper()
	errs := map[string]chan error{}
	var starts []func()
	for _, lane := range lanes {
		errs[lane] = make(chan error, 1)
		starts = append(starts, func() {
			go func() {
				_, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: f, Lane: lane, Owner: "o", LeaseTTL: time.Minute})
				errs[lane] <- err
			}()
		})
	}
	oneBatch(t, ctx, s.lanes, starts...)
	return errs
}

// A lane's write that the database refuses (here an operator's trigger on
// mf_queue that raises for that lane's rows) fails alone: the other lanes'
// writes of its batch commit, instead of failing with it at every retry.
func TestAWriteTheDatabaseRefusesFailsAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, s, l := leaderStore(t, ctx)
	f := storage.Fence{Owner: l.Owner, Term: l.Term}
	storeIn(t, ctx, s, f, "d/a", "d/refused", "d/b")
	if _, err := s.pool.Exec(ctx, `
		CREATE FUNCTION refuse_a_lane() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.lane = 'd/refused' THEN RAISE EXCEPTION 'the audit trigger refuses this row'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_a_lane BEFORE UPDATE ON mf_queue FOR EACH ROW EXECUTE FUNCTION refuse_a_lane()`); err != nil {
		t.Fatal(err)
	}
	errs := claimsInOneBatch(t, ctx, s, f, "d/a", "d/refused", "d/b")
	for _, lane := range []string{"d/a", "d/b"} {
		if err := <-errs[lane]; err != nil {
			t.Errorf("lane %s's claim, in a batch with a claim the database refuses: %v", lane, err)
		}
	}
	var pgErr *pgconn.PgError
	if err := <-errs["d/refused"]; !errors.As(err, &pgErr) || pgErr.Code != "P0001" {
		t.Errorf("the refused lane's claim: %v; want the trigger's error (SQLSTATE P0001)", err)
	}
	if !s.lanes.kept.holds(&laneWrite{lane: "d/refused"}, time.Now()) || s.lanes.kept.holds(&laneWrite{lane: "d/a"}, time.Now()) {
		t.Error("the refused lane is not set aside, or another lane is")
	}
}

// When a session holds several lanes' rows locked, a batch pays the full
// lock wait for the first of them only: once a write has run out of it, the
// batch runs again with a short wait, so that the other locked lanes' writes
// fail quickly instead of one lock wait each.
func TestABatchWaitsOutOneRowLockNotOneALane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, s, l := leaderStore(t, ctx)
	f := storage.Fence{Owner: l.Owner, Term: l.Term}
	lanes := []string{"d/locked1", "d/free", "d/locked2"}
	storeIn(t, ctx, s, f, lanes...)
	operator, _ := openSession(t, ctx, s)
	if _, err := operator.Exec(ctx, "UPDATE mf_queue SET last_error = 'looked at by hand' WHERE lane LIKE 'd/locked%'"); err != nil {
		t.Fatal(err)
	}
	errs := claimsInOneBatch(t, ctx, s, f, lanes...)
	if err := <-errs["d/free"]; err != nil {
		t.Fatalf("the free lane's claim: %v", err)
	}
	for lane, waited := range map[string]time.Duration{"d/locked1": laneLockWait, "d/locked2": lockWaitAgain} {
		err := <-errs[lane]
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("it waited %s for a row lock", waited)) {
			t.Errorf("lane %s's claim: %v; want it to have waited %s for its row lock", lane, err, waited)
		}
	}
}

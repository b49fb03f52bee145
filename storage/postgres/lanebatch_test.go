package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// Lane writes whose callers give up at any moment (queued, handed the lead,
// in a batch) get either their outcome or their context's error, never hang,
// and leave the batcher empty with every batch slot given back; and writes
// that overlap are combined.
func TestLaneBatcherSurvivesCallersGivingUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{URL: pgtest.NewSchema(t), PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
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
// commit; the lane's next writes are kept aside, so the other lanes no
// longer wait behind them at all; once the lock goes, the lane's write
// succeeds and its lane comes back to the shared batches.
func TestALockedRowHoldsUpOnlyItsOwnLane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, s, l := leaderStore(t, ctx) // s: three connections, one for each batcher and one spare
	f := storage.Fence{Owner: l.Owner, Term: l.Term}
	for i, lane := range []string{"d/locked", "d/a", "d/b", "d/a"} {
		if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{{
			Inbound: "in", ControlID: fmt.Sprint("M", i), Payload: []byte("MSH|^~\\&|M"), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "d", Lane: lane}},
		}}}); err != nil {
			t.Fatal(err)
		}
	}
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
	// done waits for the claim r of a free lane, for at most 10 s, and
	// records its delivery.
	done := func(what string, r chan result) int64 {
		t.Helper()
		var got result
		select {
		case got = <-r:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still waiting after 10s while a row of another lane is locked", what)
		}
		if got.err != nil {
			t.Fatalf("%s: %v", what, got.err)
		}
		if err := s.QueueComplete(ctx, storage.QueueCompleteParams{Fence: f, Claim: got.c.Claim()}); err != nil {
			t.Fatalf("%s, its completion: %v", what, err)
		}
		return got.c.Row.ID
	}

	operator, pid := openSession(t, ctx, s)
	if _, err := operator.Exec(ctx, "UPDATE mf_queue SET last_error = 'looked at by hand' WHERE lane = 'd/locked'"); err != nil {
		t.Fatal(err)
	}

	// One batch of three lanes' claims, the locked lane's in the middle:
	// it fails alone, and the two others commit.
	lb := s.lanes
	lb.mu.Lock()
	lb.inFlight++ // the batch slot is the test's until it leads
	lb.mu.Unlock()
	a, locked, b := claim("d/a", 0), claim("d/locked", 0), claim("d/b", 0)
	until(t, ctx, "three claims queued", func() bool {
		lb.mu.Lock()
		defer lb.mu.Unlock()
		return len(lb.queue) == 3
	})
	go lb.lead()
	floor := done("lane a's claim, in a batch with the locked lane's", a)
	done("lane b's claim, in a batch with the locked lane's", b)
	got := <-locked
	var pgErr *pgconn.PgError
	if !errors.As(got.err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("the locked lane's claim: %v; want it to fail on its lock wait (SQLSTATE 55P03)", got.err)
	}

	// Its next write waits aside: here for longer than the test lets
	// another lane wait, which it need not.
	lb.lockWait, lb.aside.lockWait = time.Minute, time.Minute
	locked = claim("d/locked", 0)
	waitForBlockedBy(t, ctx, s, pid)
	done("lane a's claim while the locked lane's waits aside", claim("d/a", floor))
	select {
	case got := <-locked:
		t.Fatalf("the locked lane's claim ended while its row was locked: %+v", got)
	default:
	}

	if err := operator.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-locked; got.err != nil {
		t.Fatalf("the locked lane's claim once the lock went: %v", got.err)
	}
	if lb.locked.holds(&laneWrite{lane: "d/locked"}, time.Now()) {
		t.Fatal("the locked lane is still kept aside after a write of it succeeded")
	}
}

// The lanes and rows set aside are those the write named (its lane, the
// rows it completes or gives back), until a write of them succeeds or
// lockedFor has passed.
func TestLockedSetKeepsAsideWhatTheWriteNamed(t *testing.T) {
	var ls lockedSet
	now := time.Now()
	if ls.holds(&laneWrite{lane: "d/x"}, now) {
		t.Fatal("an empty set holds a lane")
	}
	ls.add(&laneWrite{lane: "d/x", complete: &storage.Claim{ID: 7}, giveBack: []storage.Claim{{ID: 8}}}, now)
	for _, w := range []*laneWrite{
		{lane: "d/x"},
		{complete: &storage.Claim{ID: 7}},
		{giveBack: []storage.Claim{{ID: 8}}},
		{lane: "d/y", complete: &storage.Claim{ID: 7}},
	} {
		if !ls.holds(w, now) {
			t.Errorf("a write of lane %q completing %v, giving back %v: not kept aside", w.lane, w.complete, w.giveBack)
		}
	}
	if ls.holds(&laneWrite{lane: "d/y", complete: &storage.Claim{ID: 9}}, now) {
		t.Error("another lane's write is kept aside")
	}
	if ls.holds(&laneWrite{}, now) {
		t.Error("a write naming no lane is kept aside")
	}
	ls.release(&laneWrite{complete: &storage.Claim{ID: 7}})
	if ls.holds(&laneWrite{complete: &storage.Claim{ID: 7}}, now) || !ls.holds(&laneWrite{lane: "d/x"}, now) {
		t.Error("a release took back more or less than the write named")
	}
	if ls.holds(&laneWrite{lane: "d/x"}, now.Add(lockedFor+2*time.Second)) {
		t.Errorf("a lane set aside %s ago is still kept aside", lockedFor+2*time.Second)
	}
}

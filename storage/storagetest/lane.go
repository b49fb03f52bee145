package storagetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// 1,000 rows of one lane are claimed strictly in id order, one at a time.
func testLaneFIFO(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "P1", 1000)
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ingest gave queue ids out of order: %d after %d", ids[i], ids[i-1])
		}
	}
	for i, want := range ids {
		c := h.mustClaim(zero, "lab/P1", time.Minute, want)
		if c.Row.Attempts != 1 || c.Row.Status != storage.QueueInflight || c.Row.LeaseOwner != solo {
			t.Fatalf("claim %d: row %+v, want inflight attempt 1", i, c.Row)
		}
		if len(c.Payload) == 0 || c.ControlID == "" {
			t.Fatalf("claim %d: payload or control id missing", i)
		}
		h.mustNoWork(zero, "lab/P1") // the live head blocks its lane
		h.complete(zero, c)
	}
	h.mustNoWork(zero, "lab/P1")
}

// A claim from a floor (a row the lane claimed before) finds the same head
// as one without: the floor is inclusive, so a head re-pended in place is
// found again, and rows of the lane below it are finished anyway.
func testClaimFloor(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "P1", 3)
	from := func(floor int64, want int64) storage.QueueClaim {
		t.Helper()
		c, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: zero, Lane: "lab/P1", From: floor, Owner: solo, LeaseTTL: time.Minute})
		if err != nil || c.Row.ID != want {
			t.Fatalf("claim from %d: row %d, %v; want row %d", floor, c.Row.ID, err, want)
		}
		return c
	}
	first := from(0, ids[0])
	if err := h.s.QueueRetry(h.ctx, storage.QueueRetryParams{Fence: zero, Claim: first.Claim(), Error: "refused"}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	// Re-pended in place: still the head, and the floor includes it.
	h.complete(zero, from(ids[0], ids[0]))
	h.complete(zero, from(ids[0], ids[1]))
	h.complete(zero, from(ids[1], ids[2]))
	h.mustNoWork(zero, "lab/P1")
}

// Rows of other lanes interleave freely: a live head blocks only its own lane.
func testLanesInterleave(t *testing.T, h *harness) {
	var batch []storage.NewMessage
	for i := 0; i < 30; i++ {
		batch = append(batch, msg("lab", []string{"A", "B", "C"}[i%3]))
	}
	ids := h.ingest(zero, batch...)
	byLane := map[string][]int64{}
	for i, id := range ids {
		lane := "lab/" + []string{"A", "B", "C"}[i%3]
		byLane[lane] = append(byLane[lane], id)
	}
	// Hold the head of every lane at once: none blocks another.
	next := map[string]int{}
	for round := 0; round < 10; round++ {
		var held []storage.QueueClaim
		for _, lane := range []string{"lab/C", "lab/A", "lab/B"} {
			held = append(held, h.mustClaim(zero, lane, time.Minute, byLane[lane][next[lane]]))
			next[lane]++
		}
		for _, c := range held {
			h.complete(zero, c)
		}
	}
	for _, lane := range []string{"lab/A", "lab/B", "lab/C"} {
		h.mustNoWork(zero, lane)
	}
}

// Lane keys that differ only in trailing spaces ("123" and "123 ", as
// fixed-width systems pad) are two lanes on every store: SQL Server compares
// strings padded with spaces, and there they were one lane, whose held head
// blocked the other's messages.
func testTrailingSpaceLanes(t *testing.T, h *harness) {
	ids := h.ingest(zero, msg("lab", "123"), msg("lab", "123 "), msg("lab", "123"), msg("lab", "123 "))
	a := h.mustClaim(zero, "lab/123", time.Minute, ids[0])
	b := h.mustClaim(zero, "lab/123 ", time.Minute, ids[1]) // not blocked by lab/123's live head
	if b.Row.Lane != "lab/123 " {
		t.Fatalf("claimed a row of lane %q for lane %q", b.Row.Lane, "lab/123 ")
	}
	depth, listed := h.laneDepths()
	if listed != 2 || depth["lab/123"] != 2 || depth["lab/123 "] != 2 {
		t.Fatalf("QueueLanes: %v; want lab/123 and lab/123 (trailing space) with 2 rows each", depth)
	}
	h.complete(zero, a)
	h.complete(zero, b)
	h.mustClaim(zero, "lab/123", time.Minute, ids[2])
	h.mustClaim(zero, "lab/123 ", time.Minute, ids[3])
}

// Destinations and lanes whose names differ only in case or in trailing
// spaces ("lab", "Lab", "lab ": a config's typo) are counted and claimed
// apart on every store: SQL Server's default collations ignore case, and
// T-SQL compares strings padded with spaces, so a GROUP BY of the names
// alone merged them there and QueueStats gave one destination's counts to
// another.
func testKeysCompareExactly(t *testing.T, h *harness) {
	var batch []storage.NewMessage
	for dest, n := range map[string]int{"lab": 1, "lab ": 2, "Lab": 3} {
		for range n {
			batch = append(batch, msg(dest, "P1"))
		}
	}
	h.ingest(zero, batch...)
	stats, err := h.s.QueueStats(h.ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	count := map[string]int64{}
	for _, s := range stats {
		count[s.Destination+"|"+s.Status] += s.Count
	}
	want := map[string]int64{"lab|pending": 1, "lab |pending": 2, "Lab|pending": 3}
	if len(count) != len(want) || count["lab|pending"] != 1 || count["lab |pending"] != 2 || count["Lab|pending"] != 3 {
		t.Fatalf("QueueStats by destination|status: %v; want %v", count, want)
	}
	depth, _ := h.laneDepths()
	if len(depth) != 3 || depth["lab/P1"] != 1 || depth["lab /P1"] != 2 || depth["Lab/P1"] != 3 {
		t.Fatalf("QueueLanes depths: %v; want lab/P1 1, lab /P1 2, Lab/P1 3", depth)
	}
	for _, lane := range []string{"lab/P1", "lab /P1", "Lab/P1"} {
		c, err := h.claim(zero, lane, time.Minute)
		if err != nil {
			t.Fatalf("claim %q: %v", lane, err)
		}
		if c.Row.Lane != lane {
			t.Fatalf("claim %q took a row of lane %q", lane, c.Row.Lane)
		}
	}
}

// A live in-flight head blocks its lane; once its lease expires, the next
// claim reclaims it and delivers it before anything newer of the lane.
func testStrandedHead(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "P1", 3)
	first := h.mustClaim(zero, "lab/P1", 500*time.Millisecond, ids[0])
	h.mustNoWork(zero, "lab/P1")

	// The node that held it "crashed": nobody completes it. Wait for the
	// database clock to pass its lease, with no sweep running.
	h.waitDBClockPast(*first.Row.LeaseExpiresAt)
	again := h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	if again.Row.Attempts != 2 {
		t.Fatalf("reclaimed head: attempts %d, want 2", again.Row.Attempts)
	}
	// The first claim is stale now: it can no longer finish the row.
	err := h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: zero, Claim: first.Claim()})
	if !errors.Is(err, storage.ErrClaimLost) {
		t.Fatalf("complete with the stale claim: want ErrClaimLost, got %v", err)
	}
	h.complete(zero, again)
	h.complete(zero, h.mustClaim(zero, "lab/P1", time.Minute, ids[1]))
	h.complete(zero, h.mustClaim(zero, "lab/P1", time.Minute, ids[2]))
	h.mustNoWork(zero, "lab/P1")
}

// Claimers racing on one lane from separate connections never both hold a
// row, and the lane is still delivered exactly in order.
func testClaimRace(t *testing.T, h *harness) {
	const rows = 200
	ids := h.fill(zero, "lab", "P1", rows)
	stores := []storage.Store{h.open(), h.open()}

	var (
		holder    atomic.Int64 // id held right now, 0 when none
		mu        sync.Mutex
		delivered []int64
		wg        sync.WaitGroup
		failed    atomic.Bool
	)
	for g := 0; g < 4; g++ {
		s := stores[g%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				mu.Lock()
				done := len(delivered) == rows
				mu.Unlock()
				if done {
					return
				}
				c, err := s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: zero, Lane: "lab/P1", Owner: solo, LeaseTTL: time.Minute})
				if errors.Is(err, storage.ErrNoWork) {
					continue
				}
				if err != nil {
					t.Errorf("claim: %v", err)
					failed.Store(true)
					return
				}
				if !holder.CompareAndSwap(0, c.Row.ID) {
					t.Errorf("two claimers hold the lane at once: rows %d and %d", holder.Load(), c.Row.ID)
					failed.Store(true)
					return
				}
				mu.Lock()
				delivered = append(delivered, c.Row.ID)
				mu.Unlock()
				// Release before completing: until the completion commits
				// the row is still in flight, so no one else can claim.
				holder.Store(0)
				if err := s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: zero, Claim: c.Claim()}); err != nil {
					t.Errorf("complete %d: %v", c.Row.ID, err)
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		return
	}
	for i, id := range delivered {
		if id != ids[i] {
			t.Fatalf("delivery %d was row %d, want %d (order broken)", i, id, ids[i])
		}
	}
}

// Retry re-pends the row in place: it stays the lane head, nothing newer is
// claimed while it backs off, and it is claimed again once due.
func testRetry(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "P1", 2)
	c := h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	err := h.s.QueueRetry(h.ctx, storage.QueueRetryParams{Fence: zero, Claim: c.Claim(), Delay: 700 * time.Millisecond, Error: "connection refused", Detail: "by peer"})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	r := h.queueRow(ids[0])
	if r.Status != storage.QueuePending || r.LastError != "connection refused" || r.LastErrorDetail != "by peer" || r.LeaseExpiresAt != nil {
		t.Fatalf("after retry: %+v", r)
	}
	if due := r.NextAttemptAt.Sub(r.UpdatedAt); due < 690*time.Millisecond || due > 710*time.Millisecond {
		t.Fatalf("next_attempt_at is %v after the retry, want 700ms on the database clock", due)
	}
	h.mustNoWork(zero, "lab/P1") // not due, and row 2 must not jump ahead

	var again storage.QueueClaim
	h.waitFor("the retried head to become due", 10*time.Second, func() bool {
		again, err = h.claim(zero, "lab/P1", time.Minute)
		if errors.Is(err, storage.ErrNoWork) {
			return false
		}
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		return true
	})
	if again.Row.ID != ids[0] || again.Row.Attempts != 2 {
		t.Fatalf("after backoff claimed row %d attempt %d, want row %d attempt 2", again.Row.ID, again.Row.Attempts, ids[0])
	}
	if now := h.dbNow(); now.Before(r.NextAttemptAt) {
		t.Fatalf("claimed before due: db now %v < next_attempt_at %v", now, r.NextAttemptAt)
	}
	h.complete(zero, again)
	h.complete(zero, h.mustClaim(zero, "lab/P1", time.Minute, ids[1]))
}

// Dead sets the head aside and the lane moves on.
func testDead(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "P1", 2)
	c := h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	if err := h.s.QueueDead(h.ctx, storage.QueueDeadParams{Fence: zero, Claim: c.Claim(), Error: "AR", Detail: "unknown patient"}); err != nil {
		t.Fatalf("dead: %v", err)
	}
	if r := h.queueRow(ids[0]); r.Status != storage.QueueDead || r.LastError != "AR" || r.LastErrorDetail != "unknown patient" || r.LeaseOwner != "" {
		t.Fatalf("after dead: %+v", r)
	}
	h.complete(zero, h.mustClaim(zero, "lab/P1", time.Minute, ids[1]))
	h.mustNoWork(zero, "lab/P1")
}

// The claim-bound operations act only on the current claim of a row.
func testClaimChecks(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "P1", 1)
	c := h.mustClaim(zero, "lab/P1", 300*time.Millisecond, ids[0])

	// Extend the lease: the sweep no longer finds it expired.
	if err := h.s.QueueExtendLease(h.ctx, storage.QueueExtendLeaseParams{Fence: zero, Claim: c.Claim(), TTL: time.Hour}); err != nil {
		t.Fatalf("extend: %v", err)
	}
	h.waitDBClockPast(*c.Row.LeaseExpiresAt)
	if n, err := h.s.QueueReclaimExpired(h.ctx, storage.QueueReclaimExpiredParams{Fence: zero}); err != nil || n != 0 {
		t.Fatalf("sweep after extend: reclaimed %d, err %v; want 0", n, err)
	}
	h.mustNoWork(zero, "lab/P1")

	stale := storage.Claim{ID: c.Row.ID, Owner: solo, Attempt: c.Row.Attempts + 1}
	if err := h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: zero, Claim: storage.Claim{ID: c.Row.ID, Owner: "other", Attempt: c.Row.Attempts}}); !errors.Is(err, storage.ErrClaimLost) {
		t.Fatalf("complete by another owner: want ErrClaimLost, got %v", err)
	}
	if err := h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: zero, Claim: stale}); !errors.Is(err, storage.ErrClaimLost) {
		t.Fatalf("complete with another attempt: want ErrClaimLost, got %v", err)
	}
	missing := storage.Claim{ID: 1 << 40, Owner: solo, Attempt: 1}
	if err := h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: zero, Claim: missing}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("complete of a missing row: want ErrNotFound, got %v", err)
	}
	h.complete(zero, c)
	if err := h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: zero, Claim: c.Claim()}); !errors.Is(err, storage.ErrClaimLost) {
		t.Fatalf("second complete: want ErrClaimLost, got %v", err)
	}
	if _, err := h.s.MessageRead(h.ctx, 1<<40); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("read of a missing message: want ErrNotFound, got %v", err)
	}
}

// QueueLanes lists lanes with work and their heads; QueueStats counts rows.
func testLanesAndStats(t *testing.T, h *harness) {
	a := h.fill(zero, "lab", "A", 3)
	h.fill(zero, "lab", "B", 2)
	h.fill(zero, "ris", "A", 1)
	h.mustClaim(zero, "lab/A", time.Minute, a[0])

	lanes, err := h.s.QueueLanes(h.ctx, storage.QueueLanesParams{})
	if err != nil {
		t.Fatalf("lanes: %v", err)
	}
	got := map[string]storage.LaneSummary{}
	for _, l := range lanes {
		got[l.Lane] = l
	}
	if len(got) != 3 || got["lab/A"].Depth != 3 || got["lab/B"].Depth != 2 || got["ris/A"].Depth != 1 {
		t.Fatalf("lanes: %+v", lanes)
	}
	if h := got["lab/A"].Head; h.ID != a[0] || h.Status != storage.QueueInflight || got["lab/A"].Destination != "lab" {
		t.Fatalf("lab/A head: %+v", got["lab/A"])
	}
	if got["lab/A"].HeadAge < 0 || got["lab/A"].HeadAge > time.Minute {
		t.Fatalf("lab/A head age %v", got["lab/A"].HeadAge)
	}
	if got["lab/A"].Claimable || !got["lab/B"].Claimable || !got["ris/A"].Claimable {
		t.Fatalf("claimable: lab/A (head in flight) %v, lab/B %v, ris/A %v; want false, true, true",
			got["lab/A"].Claimable, got["lab/B"].Claimable, got["ris/A"].Claimable)
	}

	stats, err := h.s.QueueStats(h.ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	count := map[string]int64{}
	for _, s := range stats {
		count[s.Destination+"/"+s.Status] = s.Count
		if s.Held != 0 {
			t.Fatalf("stats %+v: held, with no row held", s)
		}
	}
	want := map[string]int64{"lab/pending": 4, "lab/inflight": 1, "ris/pending": 1}
	if len(count) != len(want) {
		t.Fatalf("stats %v, want %v", count, want)
	}
	for k, v := range want {
		if count[k] != v {
			t.Fatalf("stats %v, want %v", count, want)
		}
	}
}

// A walk of QueueLanes pages lists every lane with work once, in the order
// of a listing of them all, with the same depths and heads: lanes whose
// names differ only in trailing spaces or in case too (T-SQL compares
// strings padded with spaces, so a keyset on the name alone stepped over
// "lab/123 " after "lab/123"), and lanes of several destinations. The lane
// manager starts lanes from the first page on (lanes/manager.go, rescan).
func testLanePages(t *testing.T, h *harness) {
	var batch []storage.NewMessage
	for _, k := range []struct{ dest, key string }{
		{"lab", "123"}, {"lab", "123 "}, {"lab", "P1"}, {"lab", "p1"}, {"lab ", "P1"}, {"Lab", "P1"},
		{"ris", "A"}, {"ris", "B"}, {"ris", ""}, {"ris", "C"}, {"lab", "123"}, {"ris", "A"},
	} {
		batch = append(batch, msg(k.dest, k.key))
	}
	h.ingest(zero, batch...)
	all, err := h.s.QueueLanes(h.ctx, storage.QueueLanesParams{})
	if err != nil {
		t.Fatalf("lanes: %v", err)
	}
	if len(all) != 10 {
		t.Fatalf("QueueLanes listed %d lanes, want 10: %v", len(all), laneNames(all))
	}
	for _, limit := range []int{1, 2, 3, 10, 11} {
		var walked []storage.LaneSummary
		p := storage.QueueLanesParams{Limit: limit}
		for pages := 0; ; pages++ {
			if pages > len(all)+1 {
				t.Fatalf("limit %d: the walk does not end (%d pages)", limit, pages)
			}
			page, err := h.s.QueueLanes(h.ctx, p)
			if err != nil {
				t.Fatalf("limit %d: page after %q: %v", limit, p.After, err)
			}
			if len(page) > limit {
				t.Fatalf("limit %d: a page of %d lanes", limit, len(page))
			}
			walked = append(walked, page...)
			if len(page) < limit {
				break
			}
			p.After = page[len(page)-1].Lane
		}
		if len(walked) != len(all) {
			t.Fatalf("limit %d: the pages listed %d lanes, want %d: %v", limit, len(walked), len(all), laneNames(walked))
		}
		for i := range all {
			w, a := walked[i], all[i]
			if w.Lane != a.Lane || w.Depth != a.Depth || w.Head.ID != a.Head.ID || w.Destination != a.Destination || w.Claimable != a.Claimable {
				t.Fatalf("limit %d: lane %d of the pages is %q (depth %d, head %d), of the whole listing %q (depth %d, head %d); pages %v",
					limit, i, w.Lane, w.Depth, w.Head.ID, a.Lane, a.Depth, a.Head.ID, laneNames(walked))
			}
		}
	}
}

// laneNames lists ls's lane names (a failure's message).
func laneNames(ls []storage.LaneSummary) []string {
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.Lane
	}
	return names
}

// Hold parks the head: its lane is blocked, and says so, until an operator
// releases it (claimed again in place) or skips it (dead; the lane moves on).
func testHoldReleaseSkip(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "P1", 3)
	c := h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	if err := h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: zero, Claim: c.Claim(), Error: "AR", Detail: "unknown patient"}); err != nil {
		t.Fatalf("hold: %v", err)
	}
	if r := h.queueRow(ids[0]); r.Status != storage.QueuePending || !r.Held || r.LastError != "AR" || r.LastErrorDetail != "unknown patient" || r.LeaseOwner != "" {
		t.Fatalf("after hold: %+v", r)
	}
	h.mustNoWork(zero, "lab/P1")
	lane := func() storage.LaneSummary {
		t.Helper()
		lanes, err := h.s.QueueLanes(h.ctx, storage.QueueLanesParams{})
		if err != nil || len(lanes) != 1 {
			t.Fatalf("lanes: %+v, %v", lanes, err)
		}
		return lanes[0]
	}
	if l := lane(); !l.Blocked() || l.Claimable || l.Head.ID != ids[0] || l.Depth != 3 || l.Head.LastError != "AR" || l.Head.LastErrorDetail != "unknown patient" {
		t.Fatalf("held lane: %+v", l)
	}
	// The metrics count blocked lanes from the stats, not from every lane.
	held := func() map[string]int64 {
		t.Helper()
		stats, err := h.s.QueueStats(h.ctx)
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		got := map[string]int64{}
		for _, st := range stats {
			if st.Held != 0 {
				got[st.Destination+"/"+st.Status] = st.Held
			}
		}
		return got
	}
	if got := held(); len(got) != 1 || got["lab/pending"] != 1 {
		t.Fatalf("held rows by destination and status: %v; want lab/pending 1", got)
	}
	// A stale claim cannot hold the row again.
	if err := h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: zero, Claim: c.Claim()}); !errors.Is(err, storage.ErrClaimLost) {
		t.Fatalf("hold with a stale claim: want ErrClaimLost, got %v", err)
	}

	// Operator retry: the same head is claimable at once and claimed again.
	// The action names the row's message and destination (its audit line).
	want := storage.QueueActed{MessageID: h.queueRow(ids[0]).MessageID, Destination: "lab"}
	if acted, err := h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[0]}); err != nil || acted != want || acted.MessageID == 0 {
		t.Fatalf("release: %+v, %v; want %+v", acted, err, want)
	}
	if l := lane(); l.Blocked() || !l.Claimable {
		t.Fatalf("released lane: %+v", l)
	}
	if got := held(); len(got) != 0 {
		t.Fatalf("held rows after the release: %v; want none", got)
	}
	c = h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	if c.Row.Attempts != 2 {
		t.Fatalf("released head attempt %d, want 2", c.Row.Attempts)
	}
	// Refused, saying why: the row is in flight.
	h.mustNotBePending("release of a row in flight", errOf(h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[0]})), ids[0], storage.QueueInflight)
	h.mustNotBePending("skip of a row in flight", errOf(h.s.QueueSkip(h.ctx, storage.QueueSkipParams{ID: ids[0]})), ids[0], storage.QueueInflight)

	// Held again, then skipped: the lane moves on to the next row.
	if err := h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: zero, Claim: c.Claim(), Error: "AR again", Detail: "unknown patient"}); err != nil {
		t.Fatalf("hold: %v", err)
	}
	if acted, err := h.s.QueueSkip(h.ctx, storage.QueueSkipParams{ID: ids[0], Reason: "skipped by operator"}); err != nil || acted != want {
		t.Fatalf("skip: %+v, %v; want %+v", acted, err, want)
	}
	if r := h.queueRow(ids[0]); r.Status != storage.QueueDead || r.Held || r.LastError != "skipped by operator" || r.LastErrorDetail != "" {
		t.Fatalf("after skip: %+v", r)
	}
	h.complete(zero, h.mustClaim(zero, "lab/P1", time.Minute, ids[1]))
	// Refused, saying why: the row is finished, dead or done.
	h.mustNotBePending("skip of a dead row", errOf(h.s.QueueSkip(h.ctx, storage.QueueSkipParams{ID: ids[0]})), ids[0], storage.QueueDead)
	h.mustNotBePending("release of a dead row", errOf(h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[0]})), ids[0], storage.QueueDead)
	h.mustNotBePending("release of a done row", errOf(h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[1]})), ids[1], storage.QueueDone)
	if _, err := h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: 1 << 40}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("release of a missing row: want ErrNotFound, got %v", err)
	}
	// Release also cuts a retry's backoff short.
	c = h.mustClaim(zero, "lab/P1", time.Minute, ids[2])
	if err := h.s.QueueRetry(h.ctx, storage.QueueRetryParams{Fence: zero, Claim: c.Claim(), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	h.mustNoWork(zero, "lab/P1")
	if _, err := h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[2]}); err != nil {
		t.Fatal(err)
	}
	h.complete(zero, h.mustClaim(zero, "lab/P1", time.Minute, ids[2]))
}

// An operator's skip sets aside only its lane's head: a pending row behind
// it, queued normally behind a healthy head (the audit's case: three rows,
// nothing blocked, a skip of the second answered 200 and dropped it), is
// refused with a NotHead naming the head, and stays pending, whether the head
// is pending or in flight. The head itself is skipped, and then the next row,
// now the head, can be. Rows of other lanes do not count, however low their
// ids: another key of the destination, nor a key that differs only in a
// trailing space (two lanes: SQL Server compares strings padded).
func testSkipOnlyTheHead(t *testing.T, h *harness) {
	other := h.fill(zero, "lab", "P2", 1)[0]
	ids := h.fill(zero, "lab", "P1", 3)
	spaced := h.fill(zero, "lab", "P1 ", 1)[0]
	version := func() int64 {
		t.Helper()
		v, err := h.s.ConfigVersionRead(h.ctx, storage.ConfigVersionReadParams{Name: storage.QueueVersionName})
		if err != nil {
			t.Fatalf("read the queue version: %v", err)
		}
		return v
	}
	before := version()
	skip := func(id int64) error {
		return errOf(h.s.QueueSkip(h.ctx, storage.QueueSkipParams{ID: id, Reason: "skipped by operator"}))
	}
	h.mustNotBeHead("skip of the second row, its head pending", skip(ids[1]), ids[1], ids[0])
	h.mustNotBeHead("skip of the third row, its head pending", skip(ids[2]), ids[2], ids[0])
	if v := version(); v != before {
		t.Fatalf("refused skips moved the queue version from %d to %d", before, v)
	}
	// Lane "lab/P1 " is another lane: lab/P1's rows ahead of it by id do
	// not count.
	if err := skip(spaced); err != nil {
		t.Fatalf("skip of row %d, the head of lane \"lab/P1 \", with lab/P1's rows pending: %v", spaced, err)
	}
	// Refused the same way while the head is in flight.
	c := h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	h.mustNotBeHead("skip of the second row, its head in flight", skip(ids[1]), ids[1], ids[0])
	h.mustNotBePending("skip of the head in flight", skip(ids[0]), ids[0], storage.QueueInflight)
	// The head, held, is skipped; the lane's next row is its head now.
	if err := h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: zero, Claim: c.Claim(), Error: "AR"}); err != nil {
		t.Fatalf("hold: %v", err)
	}
	h.mustNotBeHead("skip of the third row, its head held", skip(ids[2]), ids[2], ids[0])
	if err := skip(ids[0]); err != nil {
		t.Fatalf("skip of the held head %d: %v", ids[0], err)
	}
	h.mustNotBeHead("skip of the third row, the second now its head", skip(ids[2]), ids[2], ids[1])
	if err := skip(ids[1]); err != nil {
		t.Fatalf("skip of row %d, its lane's head now: %v", ids[1], err)
	}
	if err := skip(ids[2]); err != nil {
		t.Fatalf("skip of row %d, its lane's head now: %v", ids[2], err)
	}
	for _, id := range ids {
		if r := h.queueRow(id); r.Status != storage.QueueDead {
			t.Fatalf("row %d after the skips: %+v; want dead", id, r)
		}
	}
	h.mustNoWork(zero, "lab/P1")
	// Lane lab/P2's head, ahead of them all by id, pending all along and
	// skipped alone.
	if r := h.queueRow(other); r.Status != storage.QueuePending {
		t.Fatalf("row %d of lane lab/P2: %+v; want pending", other, r)
	}
	if err := skip(other); err != nil {
		t.Fatalf("skip of row %d, the head of lane lab/P2: %v", other, err)
	}
	if err := skip(1 << 40); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("skip of a missing row: want ErrNotFound, got %v", err)
	}
}

// An operator's retry (QueueRelease) gives the row a fresh set of attempts:
// its claims count AttemptsSinceRetry from the retry, so a head held after
// max_attempts and retried gets max_attempts more before it is held again.
// Attempts itself keeps growing (a stale claim is told from a current one by
// it, and the API shows the total), on every path that claims a row: the
// lane claim, and an advance's head and run.
func testReleaseFreshAttempts(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "P1", 2)
	c := h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	if c.Row.Attempts != 1 || c.AttemptsAtRetry != 0 || c.AttemptsSinceRetry() != 1 {
		t.Fatalf("first claim: attempts %d, at retry %d; want 1, 0", c.Row.Attempts, c.AttemptsAtRetry)
	}
	if err := h.s.QueueRetry(h.ctx, storage.QueueRetryParams{Fence: zero, Claim: c.Claim(), Error: "refused"}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	c = h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	if err := h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: zero, Claim: c.Claim(), Error: "refused"}); err != nil {
		t.Fatalf("hold: %v", err)
	}
	if _, err := h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[0]}); err != nil {
		t.Fatalf("release: %v", err)
	}
	c = h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	if c.Row.Attempts != 3 || c.AttemptsAtRetry != 2 || c.AttemptsSinceRetry() != 1 {
		t.Fatalf("claim after the operator's retry: attempts %d, at retry %d (%d since); want 3, 2 (1 since)",
			c.Row.Attempts, c.AttemptsAtRetry, c.AttemptsSinceRetry())
	}
	if r := h.queueRow(ids[0]); r.Attempts != 3 {
		t.Fatalf("row after the operator's retry: attempts %d, want the total, 3", r.Attempts)
	}
	// A give back takes the claim's attempt back, not the retry's.
	if n, err := h.s.QueueGiveBack(h.ctx, storage.QueueGiveBackParams{Fence: zero, Claims: []storage.Claim{c.Claim()}}); err != nil || n != 1 {
		t.Fatalf("give back: %d, %v", n, err)
	}
	// A stale claim of the head, advanced: nothing completed, and the claim
	// half takes the head and the row behind it, as a run.
	a, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: c.Claim(), Lane: "lab/P1", Owner: solo, LeaseTTL: time.Minute, Ahead: 1})
	if err != nil || a.Completed || a.Next == nil || a.Next.Row.ID != ids[0] {
		t.Fatalf("advance with a stale claim of the head: %+v, %v; want row %d claimed again", a, err, ids[0])
	}
	if n := a.Next; n.Row.Attempts != 3 || n.AttemptsAtRetry != 2 || n.AttemptsSinceRetry() != 1 {
		t.Fatalf("head claimed by an advance after the operator's retry: attempts %d, at retry %d; want 3, 2", n.Row.Attempts, n.AttemptsAtRetry)
	}
	if len(a.Ahead) != 1 || a.Ahead[0].Row.ID != ids[1] || a.Ahead[0].Row.Attempts != 1 || a.Ahead[0].AttemptsAtRetry != 0 {
		t.Fatalf("run claimed behind the head: %+v; want row %d, attempts 1, at retry 0", a.Ahead, ids[1])
	}
}

// The queue's version moves with exactly the changes no lane is told of: an
// operator's retry or skip, and rows re-pended by the sweep or by promotion
// recovery. A lane's own writes and the attempts that change nothing leave
// it, and the graph's config version never moves with it.
func testQueueVersion(t *testing.T, h *harness) {
	version := func(name string) int64 {
		t.Helper()
		v, err := h.s.ConfigVersionRead(h.ctx, storage.ConfigVersionReadParams{Name: name})
		if err != nil {
			t.Fatalf("read version %q: %v", name, err)
		}
		return v
	}
	want := int64(0)
	step := func(what string, moved bool) {
		t.Helper()
		if moved {
			want++
		}
		if v := version(storage.QueueVersionName); v != want {
			t.Fatalf("after %s: queue version %d, want %d", what, v, want)
		}
	}
	step("nothing", false)
	ids := h.fill(zero, "lab", "P1", 3)
	c := h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	if err := h.s.QueueRetry(h.ctx, storage.QueueRetryParams{Fence: zero, Claim: c.Claim(), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	step("ingest, a claim and a lane's retry", false)
	if _, err := h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[0]}); err != nil {
		t.Fatal(err)
	}
	step("an operator's retry", true)
	c = h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	if _, err := h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[0]}); !errors.Is(err, storage.ErrNotPending) {
		t.Fatalf("release of a row in flight: want ErrNotPending, got %v", err)
	}
	if _, err := h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: 1 << 40}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("release of a missing row: want ErrNotFound, got %v", err)
	}
	step("retries that matched nothing", false)
	if err := h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: zero, Claim: c.Claim(), Error: "AR"}); err != nil {
		t.Fatal(err)
	}
	step("a lane's hold", false)
	if _, err := h.s.QueueSkip(h.ctx, storage.QueueSkipParams{ID: ids[0], Reason: "skipped by operator"}); err != nil {
		t.Fatal(err)
	}
	step("an operator's skip", true)
	if _, err := h.s.QueueSkip(h.ctx, storage.QueueSkipParams{ID: ids[0]}); !errors.Is(err, storage.ErrNotPending) {
		t.Fatalf("skip of a dead row: want ErrNotPending, got %v", err)
	}
	step("a skip that matched nothing", false)

	c = h.mustClaim(zero, "lab/P1", 200*time.Millisecond, ids[1])
	if n, err := h.s.QueueReclaimExpired(h.ctx, storage.QueueReclaimExpiredParams{Fence: zero}); err != nil || n != 0 {
		t.Fatalf("sweep of a live lease: %d rows, err %v; want 0", n, err)
	}
	step("a sweep that re-pended nothing", false)
	h.waitDBClockPast(*c.Row.LeaseExpiresAt)
	if n, err := h.s.QueueReclaimExpired(h.ctx, storage.QueueReclaimExpiredParams{Fence: zero}); err != nil || n != 1 {
		t.Fatalf("sweep: %d rows, err %v; want 1", n, err)
	}
	step("a sweep that re-pended a row", true)

	h.mustClaim(zero, "lab/P1", time.Hour, ids[1])
	if n, err := h.s.QueueRecoverForeign(h.ctx, storage.QueueRecoverForeignParams{Fence: zero, Owner: "another-process"}); err != nil || n != 1 {
		t.Fatalf("recovery: %d rows, err %v; want 1", n, err)
	}
	step("a recovery that re-pended a row", true)
	if n, err := h.s.QueueRecoverForeign(h.ctx, storage.QueueRecoverForeignParams{Fence: zero, Owner: "another-process"}); err != nil || n != 0 {
		t.Fatalf("second recovery: %d rows, err %v; want 0", n, err)
	}
	step("a recovery that re-pended nothing", false)
	if v := version(""); v != 0 {
		t.Fatalf("the graph's config version moved to %d with the queue's", v)
	}
}

// QueueAdvance completes the current claim and claims the lane's next head
// in one write; a stale claim completes nothing, and an empty or blocked
// lane claims nothing, neither of which is an error.
func testAdvance(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "P1", 3)
	first := h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	advance := func(c storage.QueueClaim) storage.QueueAdvanced {
		t.Helper()
		a, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: c.Claim(), Lane: "lab/P1", Owner: solo, LeaseTTL: time.Minute})
		if err != nil {
			t.Fatalf("advance from row %d: %v", c.Row.ID, err)
		}
		return a
	}
	a := advance(first)
	if !a.Completed || a.Next == nil || a.Next.Row.ID != ids[1] {
		t.Fatalf("advance from row %d: %+v, want completed and row %d claimed", ids[0], a, ids[1])
	}
	if r := h.queueRow(ids[0]); r.Status != storage.QueueDone || r.LeaseOwner != "" {
		t.Fatalf("advanced-from row: %+v, want done", r)
	}
	second := *a.Next
	if second.Row.Status != storage.QueueInflight || second.Row.Attempts != 1 || second.Row.LeaseOwner != solo || len(second.Payload) == 0 || second.ControlID == "" {
		t.Fatalf("claimed by advance: %+v", second)
	}
	// The first claim again: it is no longer current, and the lane's head
	// (the second row) is in flight under a live lease.
	if a := advance(first); a.Completed || a.Next != nil {
		t.Fatalf("advance with a stale claim: %+v, want nothing completed, nothing claimed", a)
	}
	if r := h.queueRow(ids[1]); r.Status != storage.QueueInflight || r.Attempts != 1 {
		t.Fatalf("the live head after a stale advance: %+v", r)
	}
	// A head backing off blocks the claim half of an advance.
	third := advance(second).Next
	if third == nil || third.Row.ID != ids[2] {
		t.Fatalf("advance from row %d claimed %+v, want row %d", ids[1], third, ids[2])
	}
	if err := h.s.QueueRetry(h.ctx, storage.QueueRetryParams{Fence: zero, Claim: third.Claim(), Delay: time.Hour, Error: "refused"}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if a := advance(second); a.Completed || a.Next != nil {
		t.Fatalf("advance past a head backing off: %+v, want nothing", a)
	}
	if r := h.queueRow(ids[2]); r.Status != storage.QueuePending || r.Attempts != 1 {
		t.Fatalf("the backing-off head after an advance: %+v", r)
	}
	// A stale claim whose row went back to pending (its lease expired and
	// the sweep re-pended it): nothing is completed, and the claim half
	// takes that same row again, since it is still the lane's head (the
	// completed row is the claim's floor, inclusive).
	fourth := h.fill(zero, "lab", "P3", 2)
	stale := h.mustClaim(zero, "lab/P3", 500*time.Millisecond, fourth[0])
	h.waitDBClockPast(*stale.Row.LeaseExpiresAt)
	if n, err := h.s.QueueReclaimExpired(h.ctx, storage.QueueReclaimExpiredParams{Fence: zero}); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want the one expired row re-pended", n, err)
	}
	a, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: stale.Claim(), Lane: "lab/P3", Owner: solo, LeaseTTL: time.Minute})
	if err != nil || a.Completed || a.Next == nil || a.Next.Row.ID != fourth[0] || a.Next.Row.Attempts != 2 {
		t.Fatalf("advance with a stale claim of a re-pended head: %+v, %v; want nothing completed and row %d claimed again (attempt 2)", a, err, fourth[0])
	}

	// The last row of a lane: completed, nothing next.
	other := h.fill(zero, "lab", "P2", 1)
	last := h.mustClaim(zero, "lab/P2", time.Minute, other[0])
	a, err = h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: last.Claim(), Lane: "lab/P2", Owner: solo, LeaseTTL: time.Minute})
	if err != nil || !a.Completed || a.Next != nil {
		t.Fatalf("advance from a lane's last row: %+v, %v; want completed, nothing next", a, err)
	}
}

// Many lanes advancing at once (which PostgreSQL combines into shared
// transactions and SQLite into shared commits) each deliver exactly their
// own rows, in order, once; writes under a stale fence fail alone, changing
// nothing, while the current term's go through beside them.
func testAdvanceManyLanes(t *testing.T, h *harness) {
	const lanes, rows = 24, 40
	old := h.elect("node-a", time.Minute)
	if _, err := h.s.LeaseResign(h.ctx, storage.LeaseResignParams{Owner: old.Owner, Term: old.Term}); err != nil {
		t.Fatalf("resign: %v", err)
	}
	cur := h.elect("node-b", time.Minute)
	want := map[string][]int64{}
	var batch []storage.NewMessage
	for r := 0; r < rows; r++ {
		for l := 0; l < lanes; l++ {
			batch = append(batch, msg("lab", fmt.Sprint("L", l)))
		}
	}
	for i, id := range h.ingest(cur, batch...) {
		lane := fmt.Sprint("lab/L", i%lanes)
		want[lane] = append(want[lane], id)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		got    = map[string][]int64{}
		stale  atomic.Int64
		failed atomic.Bool
	)
	for l := 0; l < lanes; l++ {
		lane := fmt.Sprint("lab/L", l)
		wg.Add(2)
		go func() { // the current leader's lane
			defer wg.Done()
			c, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: cur, Lane: lane, Owner: cur.Owner, LeaseTTL: time.Minute})
			for err == nil {
				mu.Lock()
				got[lane] = append(got[lane], c.Row.ID)
				mu.Unlock()
				var a storage.QueueAdvanced
				a, err = h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: cur, Claim: c.Claim(), Lane: lane, Owner: cur.Owner, LeaseTTL: time.Minute})
				switch {
				case err != nil:
				case !a.Completed:
					err = fmt.Errorf("row %d was not completed", c.Row.ID)
				case a.Next == nil:
					return
				default:
					c = *a.Next
				}
			}
			if !errors.Is(err, storage.ErrNoWork) {
				t.Errorf("lane %s: %v", lane, err)
				failed.Store(true)
			}
		}()
		go func() { // a deposed leader still trying the same lane
			defer wg.Done()
			for i := 0; i < 10 && !failed.Load(); i++ {
				_, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: old, Lane: lane, Owner: old.Owner, LeaseTTL: time.Minute})
				if !errors.Is(err, storage.ErrFenced) {
					t.Errorf("claim under the old term in %s: want ErrFenced, got %v", lane, err)
					failed.Store(true)
					return
				}
				stale.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		return
	}
	for lane, ids := range want {
		if !reflect.DeepEqual(got[lane], ids) {
			t.Fatalf("lane %s delivered %v, want %v", lane, got[lane], ids)
		}
		for _, id := range ids {
			if r := h.queueRow(id); r.Status != storage.QueueDone || r.Attempts != 1 || r.LeaseOwner != "" {
				t.Fatalf("row %d of %s: %+v, want done at attempt 1", id, lane, r)
			}
		}
	}
	if stale.Load() != lanes*10 {
		t.Fatalf("%d stale claims failed, want %d", stale.Load(), lanes*10)
	}
}

// An advance with Ahead claims the new head and the rows right behind it,
// in order, as one run that never skips a row: it stops at the first row
// that is not claimable. Rows given back are pending again as if never
// claimed (their attempt taken back), and a stale claim gives back nothing.
func testAdvanceAhead(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "R1", 6)
	first := h.mustClaim(zero, "lab/R1", time.Minute, ids[0])
	advance := func(c storage.Claim, ahead int) storage.QueueAdvanced {
		t.Helper()
		a, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: c, Lane: "lab/R1", Owner: solo, LeaseTTL: time.Minute, Ahead: ahead})
		if err != nil {
			t.Fatalf("advance from row %d: %v", c.ID, err)
		}
		return a
	}
	a := advance(first.Claim(), 3)
	if got, want := runIDs(a), ids[1:5]; !a.Completed || !slices.Equal(got, want) {
		t.Fatalf("advance from row %d with 3 ahead: completed %v, claimed %v; want completed, %v", ids[0], a.Completed, got, want)
	}
	for _, c := range append([]storage.QueueClaim{*a.Next}, a.Ahead...) {
		if c.Row.Status != storage.QueueInflight || c.Row.Attempts != 1 || c.Row.LeaseOwner != solo || len(c.Payload) == 0 || c.ControlID == "" {
			t.Fatalf("claimed in a run: %+v", c)
		}
	}
	run := append([]storage.QueueClaim{*a.Next}, a.Ahead...)

	// The lane's head is in flight: nothing more to claim.
	if _, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: zero, Lane: "lab/R1", Owner: solo, LeaseTTL: time.Minute}); !errors.Is(err, storage.ErrNoWork) {
		t.Fatalf("claim while a run is in flight: %v, want ErrNoWork", err)
	}

	// Give back all but the run's second row: the lane is then pending,
	// in flight (live), pending, pending, pending. A run from its head stops
	// at the row in flight.
	// The first carries why its send wrote nothing (the destination
	// unreachable), for GET /lanes; the others keep theirs.
	back := []storage.Claim{run[0].Claim(), run[2].Claim(), run[3].Claim()}
	if n, err := h.s.QueueGiveBack(h.ctx, storage.QueueGiveBackParams{Fence: zero, Claims: back, Lane: "lab/R1", Error: "dial refused", Detail: "the detail"}); err != nil || n != 3 {
		t.Fatalf("give back 3 rows: %d, %v", n, err)
	}
	for _, i := range []int{1, 3, 4} {
		r := h.queueRow(ids[i])
		if r.Status != storage.QueuePending || r.Attempts != 0 || r.LeaseOwner != "" || r.LeaseExpiresAt != nil {
			t.Fatalf("row %d given back: %+v; want pending, attempt 0, no lease", ids[i], r)
		}
		if want := map[bool]string{true: "dial refused: the detail", false: ": "}[i == 1]; r.LastError+": "+r.LastErrorDetail != want {
			t.Fatalf("row %d given back: last error %q, detail %q; want %q", ids[i], r.LastError, r.LastErrorDetail, want)
		}
	}
	// The same claims again: no longer current, nothing given back.
	if n, err := h.s.QueueGiveBack(h.ctx, storage.QueueGiveBackParams{Fence: zero, Claims: back}); err != nil || n != 0 {
		t.Fatalf("give back stale claims: %d, %v; want 0", n, err)
	}
	// first's claim is done already (Completed false), but the advance still
	// claims from the lane's head: row 1 only, since row 2 is in flight.
	a = advance(first.Claim(), 5)
	if got := runIDs(a); a.Completed || !slices.Equal(got, ids[1:2]) {
		t.Fatalf("a run up to a row in flight: completed %v, claimed %v; want not completed, %v", a.Completed, got, ids[1:2])
	}
	if a.Next.Row.Attempts != 1 {
		t.Fatalf("a row claimed again after being given back: attempt %d, want 1", a.Next.Row.Attempts)
	}

	// A run stops at a held row too: hold row 1, then a run from it finds
	// nothing (a held head); an advance with Ahead 0 claims the head alone.
	if err := h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: zero, Claim: a.Next.Claim(), Error: "x"}); err != nil {
		t.Fatal(err)
	}
	if a := advance(first.Claim(), 5); a.Next != nil {
		t.Fatalf("a run from a held head: %v", runIDs(a))
	}
	if _, err := h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[1]}); err != nil {
		t.Fatal(err)
	}
	a = advance(first.Claim(), 0)
	if got := runIDs(a); !slices.Equal(got, ids[1:2]) || len(a.Ahead) != 0 {
		t.Fatalf("an advance without ahead: %v; want %v alone", got, ids[1:2])
	}
	// Completing row 1 with a run of 10: row 2 is still in flight (its claim
	// live), so nothing is claimed; once it completes, rows 3 to 5 are.
	if a := advance(a.Next.Claim(), 10); !a.Completed || a.Next != nil {
		t.Fatalf("advance to a head in flight: %+v", a)
	}
	a = advance(run[1].Claim(), 10)
	if got, want := runIDs(a), ids[3:6]; !a.Completed || !slices.Equal(got, want) {
		t.Fatalf("advance to the lane's last rows: completed %v, claimed %v; want completed, %v", a.Completed, got, want)
	}
}

// A lane write that fails names no lane in its error: a lane's key is often a
// patient id, and the engine logs these errors. Here the writes fail because
// their context is cancelled (the fenced ones: testFencedOperations).
func testFailuresNameNoLane(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "MRN0042", 2)
	c := h.mustClaim(zero, "lab/MRN0042", time.Minute, ids[0])
	gone, cancel := context.WithCancel(h.ctx)
	cancel()
	_, claimErr := h.s.QueueClaimNext(gone, storage.QueueClaimNextParams{Fence: zero, Lane: "lab/MRN0042", Owner: solo, LeaseTTL: time.Minute})
	_, advanceErr := h.s.QueueAdvance(gone, storage.QueueAdvanceParams{Fence: zero, Claim: c.Claim(), Lane: "lab/MRN0042", Owner: solo, LeaseTTL: time.Minute, Ahead: 1})
	for name, err := range map[string]error{"claim": claimErr, "advance": advanceErr} {
		switch {
		case err == nil:
			t.Errorf("%s with a cancelled context: no error", name)
		case strings.Contains(err.Error(), "MRN0042"):
			t.Errorf("%s: the error names the lane: %v", name, err)
		}
	}
}

// QueueReleaseOwn gives back exactly the rows of one lane in flight under one
// owner's lease, as QueueGiveBack gives back a claim: pending, no lease, the
// claim's attempt taken back (a row tried before keeps that attempt). The
// lane's rows of another owner, its pending and done rows, and the owner's
// rows of another lane stay as they were; the queue's version does not move;
// a stale fence changes nothing. A lane calls it after a claim whose reply
// was lost: here the rows such a claim took.
func testReleaseOwn(t *testing.T, h *harness) {
	const me, other = "node-a:run-1", "node-a:run-0"
	f := h.elect("node-a", time.Minute)
	a := h.fill(f, "lab", "A", 6)
	b := h.fill(f, "lab", "B", 1)
	claimNext := func(lane, owner string) storage.QueueClaim {
		t.Helper()
		c, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: f, Lane: lane, Owner: owner, LeaseTTL: time.Minute})
		if err != nil {
			t.Fatalf("claim %s for %s: %v", lane, owner, err)
		}
		return c
	}
	// advance claims a run of lab/A for owner (stale is done already: the
	// advance only claims).
	advance := func(stale storage.Claim, owner string, ahead int) []int64 {
		t.Helper()
		adv, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: f, Claim: stale, Lane: "lab/A", Owner: owner, LeaseTTL: time.Minute, Ahead: ahead})
		if err != nil || adv.Completed || adv.Next == nil {
			t.Fatalf("advance for %s: %+v, %v", owner, adv, err)
		}
		ids := []int64{adv.Next.Row.ID}
		for _, c := range adv.Ahead {
			ids = append(ids, c.Row.ID)
		}
		return ids
	}
	release := func(fence storage.Fence, lane, owner string) (int64, error) {
		return h.s.QueueReleaseOwn(h.ctx, storage.QueueReleaseOwnParams{Fence: fence, Lane: lane, Owner: owner})
	}

	// lab/A: row 0 done; row 1 tried once and pending again; then rows 1 to
	// 3 claimed by the other owner, who gives back 1 and 2, keeping 3 in
	// flight; then rows 1 and 2 claimed by me, stopping at row 3.
	first := claimNext("lab/A", me)
	h.complete(f, first)
	tried := claimNext("lab/A", me)
	if err := h.s.QueueRetry(h.ctx, storage.QueueRetryParams{Fence: f, Claim: tried.Claim(), Error: "refused"}); err != nil {
		t.Fatal(err)
	}
	if got := advance(first.Claim(), other, 2); !slices.Equal(got, a[1:4]) {
		t.Fatalf("the other owner's run: %v, want %v", got, a[1:4])
	}
	back := []storage.Claim{{ID: a[1], Owner: other, Attempt: 2}, {ID: a[2], Owner: other, Attempt: 1}}
	if n, err := h.s.QueueGiveBack(h.ctx, storage.QueueGiveBackParams{Fence: f, Claims: back, Lane: "lab/A"}); err != nil || n != 2 {
		t.Fatalf("give back: %d, %v", n, err)
	}
	if got := advance(first.Claim(), me, 5); !slices.Equal(got, a[1:3]) {
		t.Fatalf("my run: %v, want %v (up to the other owner's row in flight)", got, a[1:3])
	}
	mineElsewhere := claimNext("lab/B", me)
	version := h.queueVersion
	before := version()

	if n, err := release(f, "lab/A", me); err != nil || n != 2 {
		t.Fatalf("release own of lab/A: %d, %v; want 2", n, err)
	}
	pendingAt := func(id, attempts int64) {
		t.Helper()
		if r := h.queueRow(id); r.Status != storage.QueuePending || r.Attempts != attempts || r.LeaseOwner != "" || r.LeaseExpiresAt != nil {
			t.Fatalf("row %d: %+v; want pending, %d attempts, no lease", id, r, attempts)
		}
	}
	pendingAt(a[1], 1) // its attempt before my claim stays
	pendingAt(a[2], 0)
	pendingAt(a[4], 0)
	pendingAt(a[5], 0)
	if r := h.queueRow(a[0]); r.Status != storage.QueueDone || r.Attempts != 1 {
		t.Fatalf("done row: %+v", r)
	}
	if r := h.queueRow(a[3]); r.Status != storage.QueueInflight || r.LeaseOwner != other || r.Attempts != 1 {
		t.Fatalf("the other owner's row of the lane: %+v; want still in flight under %s", r, other)
	}
	if r := h.queueRow(b[0]); r.Status != storage.QueueInflight || r.LeaseOwner != me || r.Attempts != 1 {
		t.Fatalf("my row of another lane: %+v; want still in flight under %s", r, me)
	}
	if v := version(); v != before {
		t.Fatalf("the queue's version moved from %d to %d: the lane that releases claims next", before, v)
	}
	if n, err := release(f, "lab/A", me); err != nil || n != 0 {
		t.Fatalf("release own again: %d, %v; want 0", n, err)
	}
	// A claim of the lane after a release finds the head it gave back.
	if c := claimNext("lab/A", me); c.Row.ID != a[1] || c.Row.Attempts != 2 {
		t.Fatalf("claim after the release: row %d attempt %d, want row %d attempt 2", c.Row.ID, c.Row.Attempts, a[1])
	}

	// Fenced by the term: once another node leads, the old term releases
	// nothing.
	if _, err := h.s.LeaseResign(h.ctx, storage.LeaseResignParams{Owner: f.Owner, Term: f.Term}); err != nil {
		t.Fatal(err)
	}
	newer := h.elect("node-b", time.Minute)
	for _, stale := range []storage.Fence{f, zero, {Owner: f.Owner, Term: newer.Term}} {
		if n, err := release(stale, "lab/B", me); !errors.Is(err, storage.ErrFenced) || n != 0 {
			t.Fatalf("release own with stale fence %+v: %d, %v; want ErrFenced", stale, n, err)
		} else if strings.Contains(err.Error(), "lab/") {
			t.Fatalf("the error names the lane: %v", err)
		}
	}
	if r := h.queueRow(b[0]); r.Status != storage.QueueInflight || r.LeaseOwner != me || r.Attempts != mineElsewhere.Row.Attempts {
		t.Fatalf("my row of lab/B after fenced releases: %+v; want unchanged", r)
	}
	if n, err := release(newer, "lab/B", me); err != nil || n != 1 {
		t.Fatalf("release own of lab/B in the current term: %d, %v; want 1", n, err)
	}
	pendingAt(b[0], 0)
}

// Ingests racing from several handles (several inbounds, and an operator's
// resend from another node's API) into one lane never make a queue id
// visible before a lower one: a lane walked as the engine walks it
// (lanes/lane.go: each claim from the floor of the row it claimed last, the
// delivery recorded and the next row claimed in one QueueAdvance, with rows
// ahead) delivers every queue id the ingests and the resends returned, in id
// order, each once, and when the walk is drained a claim from no floor
// finds nothing left behind it. This is the FIFO argument's (b) beside each
// dialect's queue_claim_next.sql: were id n+1 visible while id n was
// uncommitted, the walk would deliver n+1, raise its floor past n, and never
// deliver n (or deliver it after n+1).
func testConcurrentIngestNeverHidesAnEarlierID(t *testing.T, h *harness) {
	const (
		lane      = "lab/P1"
		ingesters = 3
		batches   = 40
		resends   = 5
	)
	// A message queued before the race, for the resends to queue again.
	first := h.ingest(zero, msg("lab", "P1"))[0]
	resent := h.msgOf[first]

	var (
		mu      sync.Mutex
		want    = []int64{first}
		wg      sync.WaitGroup
		failed  atomic.Bool
		stopped atomic.Bool // every ingest and resend has returned
	)
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		failed.Store(true)
	}
	start := make(chan struct{}) // every handle is open: they start at once
	for g := 0; g < ingesters; g++ {
		s := h.open()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for b := 0; b < batches && !failed.Load(); b++ {
				// 1 to 4 messages of the lane, with messages of another
				// lane between them, so the lane's ids have gaps.
				var batch []storage.NewMessage
				for i := 0; i <= (g+b)%4; i++ {
					batch = append(batch, msg("lab", "P1"), msg("lab", fmt.Sprint("Q", g)))
				}
				res, err := s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: batch})
				if err != nil {
					fail("ingester %d, batch %d: %v", g, b, err)
					return
				}
				mu.Lock()
				for i, r := range res {
					if batch[i].Deliveries[0].Lane == lane {
						want = append(want, r.QueueIDs[0])
					}
				}
				mu.Unlock()
			}
		}()
	}
	resender := h.open()
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		for i := 0; i < resends && !failed.Load(); i++ {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			ids, err := resender.MessageResend(h.ctx, storage.MessageResendParams{MessageID: resent,
				Deliveries: []storage.Delivery{{Destination: "lab", Lane: lane}}})
			if err != nil || len(ids) != 1 {
				fail("resend %d of message %d: %v, %v", i, resent, ids, err)
				return
			}
			mu.Lock()
			want = append(want, ids[0])
			mu.Unlock()
		}
	}()
	go func() {
		wg.Wait()
		stopped.Store(true)
	}()
	// A failure of the walk stops them before the test ends.
	defer func() {
		failed.Store(true)
		wg.Wait()
	}()
	close(start)

	// The lane's walk, on the harness's own handle, while they run.
	var (
		delivered []int64
		floor     int64
		inHand    []storage.QueueClaim // claimed, not yet delivered, in id order
	)
	take := func(c storage.QueueClaim) {
		t.Helper()
		if c.Row.Lane != lane {
			t.Fatalf("claimed row %d of lane %q for lane %q", c.Row.ID, c.Row.Lane, lane)
		}
		inHand = append(inHand, c)
	}
	for !failed.Load() {
		if len(inHand) == 0 {
			done := stopped.Load() // read before the claim: a claim begun after every ingest returned
			c, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: zero, Lane: lane, From: floor, Owner: solo, LeaseTTL: time.Minute})
			if errors.Is(err, storage.ErrNoWork) {
				if done {
					break
				}
				continue
			}
			if err != nil {
				t.Fatalf("claim from %d: %v", floor, err)
			}
			take(c)
		}
		c := inHand[0]
		inHand = inHand[1:]
		floor = c.Row.ID
		delivered = append(delivered, c.Row.ID)
		if len(inHand) > 0 { // rows claimed ahead: record this one alone
			h.complete(zero, c)
			continue
		}
		a, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: c.Claim(), Lane: lane, Owner: solo, LeaseTTL: time.Minute, Ahead: len(delivered) % 3})
		if err != nil || !a.Completed {
			t.Fatalf("advance from row %d: %+v, %v; want it completed", c.Row.ID, a, err)
		}
		if a.Next != nil {
			take(*a.Next)
			for _, r := range a.Ahead {
				take(r)
			}
		}
	}
	wg.Wait()
	if failed.Load() {
		return
	}
	slices.Sort(want)
	if !slices.Equal(delivered, want) {
		var missing []int64
		for _, id := range want {
			if !slices.Contains(delivered, id) {
				missing = append(missing, id)
			}
		}
		at := 0
		for at < len(delivered) && at < len(want) && delivered[at] == want[at] {
			at++
		}
		t.Fatalf("the walk delivered %d rows, %d were queued: delivery %d was %v, want row %d; never delivered: %v",
			len(delivered), len(want), at, delivered[at:min(at+1, len(delivered))], want[min(at, len(want)-1)], missing)
	}
	if c, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: zero, Lane: lane, Owner: solo, LeaseTTL: time.Minute}); !errors.Is(err, storage.ErrNoWork) {
		t.Fatalf("a claim from no floor after the walk: row %d, %v; want ErrNoWork (a row the floor passed over)", c.Row.ID, err)
	}
}

// Every write that acts on a claim acts only on the current claim of its
// row: the same row, owner and attempt, still in flight. Under a claim of
// another owner (one that differs only in case too), of another attempt, or
// one whose row's lease expired and was claimed again, a retry, dead, hold,
// lease extension and completion fail with ErrClaimLost, a give back gives
// back nothing, and an advance completes nothing (nor claims past the live
// head), with or without the lane named; and none of them changes the store.
// Of a row that does not exist: ErrNotFound, nothing given back, nothing
// completed. A lane relies on this: a delivery whose lease ran out is sent
// again by the claim that took the row over, and the first sender's late
// record must not finish, re-pend, set aside or extend that claim
// (lanes/lane.go treats ErrClaimLost as "delivered again, give back what is
// ahead").
func testEveryClaimWriteChecksOwnerAndAttempt(t *testing.T, h *harness) {
	const other = "node-b:run-1:bb"
	type outcome int
	const (
		lost    outcome = iota // the claim is not current
		missing                // the row does not exist
	)
	type op struct {
		name string
		do   func(lane string, c storage.Claim, want outcome) error
	}
	claimErr := func(want outcome, err error) error {
		w := storage.ErrClaimLost
		if want == missing {
			w = storage.ErrNotFound
		}
		if !errors.Is(err, w) || (want == missing && errors.Is(err, storage.ErrClaimLost)) {
			return fmt.Errorf("%v; want %v", err, w)
		}
		return nil
	}
	var ops []op
	// Completions and give backs both with the lane named, as a lane names
	// it (lanes/lane.go), and without (it is optional).
	for _, named := range []bool{false, true} {
		of := func(lane string) string {
			if named {
				return lane
			}
			return ""
		}
		suffix := map[bool]string{false: "", true: " naming the lane"}[named]
		ops = append(ops,
			op{"complete" + suffix, func(lane string, c storage.Claim, want outcome) error {
				return claimErr(want, h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: zero, Claim: c, Lane: of(lane)}))
			}},
			op{"give back" + suffix, func(lane string, c storage.Claim, _ outcome) error {
				n, err := h.s.QueueGiveBack(h.ctx, storage.QueueGiveBackParams{Fence: zero, Claims: []storage.Claim{c}, Lane: of(lane), Error: "x", Detail: "y"})
				if err != nil || n != 0 {
					return fmt.Errorf("%d given back, %v; want 0, no error", n, err)
				}
				return nil
			}},
		)
	}
	ops = append(ops,
		op{"retry", func(_ string, c storage.Claim, want outcome) error {
			return claimErr(want, h.s.QueueRetry(h.ctx, storage.QueueRetryParams{Fence: zero, Claim: c, Delay: time.Hour, Error: "x", Detail: "y"}))
		}},
		op{"dead", func(_ string, c storage.Claim, want outcome) error {
			return claimErr(want, h.s.QueueDead(h.ctx, storage.QueueDeadParams{Fence: zero, Claim: c, Error: "x", Detail: "y"}))
		}},
		op{"hold", func(_ string, c storage.Claim, want outcome) error {
			return claimErr(want, h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: zero, Claim: c, Error: "x", Detail: "y"}))
		}},
		op{"extend", func(_ string, c storage.Claim, want outcome) error {
			return claimErr(want, h.s.QueueExtendLease(h.ctx, storage.QueueExtendLeaseParams{Fence: zero, Claim: c, TTL: time.Hour}))
		}},
		op{"advance", func(lane string, c storage.Claim, _ outcome) error {
			// The lane's head is in flight under a live claim (or, for a
			// missing row, the floor is past every row): nothing to claim.
			a, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: c, Lane: lane, Owner: c.Owner, LeaseTTL: time.Minute, Ahead: 1})
			if err != nil || a.Completed || a.Next != nil || len(a.Ahead) != 0 {
				return fmt.Errorf("%+v, %v; want nothing completed, nothing claimed, no error", a, err)
			}
			return nil
		}},
	)
	msgIDs := func() []int64 {
		var ids []int64
		for _, id := range h.msgOf {
			ids = append(ids, id)
		}
		return ids
	}
	// each makes every op with claim c and checks that none changed the
	// store.
	each := func(what, lane string, c storage.Claim, want outcome) {
		t.Helper()
		for _, o := range ops {
			before := h.snapshot(msgIDs())
			if err := o.do(lane, c, want); err != nil {
				t.Errorf("%s with %s, claim %+v: %v", o.name, what, c, err)
			}
			if after := h.snapshot(msgIDs()); !reflect.DeepEqual(before, after) {
				t.Fatalf("%s with %s, claim %+v, changed the store:\nbefore %+v\nafter  %+v", o.name, what, c, before, after)
			}
		}
	}

	// A live claim, and claims that are not it.
	ids := h.fill(zero, "lab", "P1", 2)
	cur := h.mustClaim(zero, "lab/P1", time.Minute, ids[0]).Claim()
	each("another owner", "lab/P1", storage.Claim{ID: cur.ID, Owner: other, Attempt: cur.Attempt}, lost)
	each("the owner in upper case", "lab/P1", storage.Claim{ID: cur.ID, Owner: strings.ToUpper(cur.Owner), Attempt: cur.Attempt}, lost)
	each("the next attempt", "lab/P1", storage.Claim{ID: cur.ID, Owner: cur.Owner, Attempt: cur.Attempt + 1}, lost)
	each("the previous attempt", "lab/P1", storage.Claim{ID: cur.ID, Owner: cur.Owner, Attempt: cur.Attempt - 1}, lost)
	each("a missing row", "lab/P1", storage.Claim{ID: 1 << 40, Owner: cur.Owner, Attempt: 1}, missing)

	// A claim whose lease ran out and whose row another claim took over
	// (another owner's: a new leader's lane, at attempt 2).
	late := h.fill(zero, "lab", "P2", 2)
	stale := h.mustClaim(zero, "lab/P2", 300*time.Millisecond, late[0])
	h.waitDBClockPast(*stale.Row.LeaseExpiresAt)
	again, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: zero, Lane: "lab/P2", Owner: other, LeaseTTL: time.Minute})
	if err != nil || again.Row.ID != late[0] || again.Row.Attempts != 2 || again.Row.LeaseOwner != other {
		t.Fatalf("claim of the expired head by %s: %+v, %v; want row %d at attempt 2", other, again.Row, err, late[0])
	}
	each("the claim taken over", "lab/P2", stale.Claim(), lost)
	each("the old owner at the new attempt", "lab/P2", storage.Claim{ID: late[0], Owner: stale.Row.LeaseOwner, Attempt: again.Row.Attempts}, lost)
	each("the new owner at the old attempt", "lab/P2", storage.Claim{ID: late[0], Owner: other, Attempt: stale.Row.Attempts}, lost)
	if t.Failed() {
		return
	}

	// The current claims still act (so the checks above can fail): each
	// write once, with the claim it needs.
	if err := h.s.QueueExtendLease(h.ctx, storage.QueueExtendLeaseParams{Fence: zero, Claim: cur, TTL: time.Hour}); err != nil {
		t.Fatalf("extend the current claim: %v", err)
	}
	if n, err := h.s.QueueGiveBack(h.ctx, storage.QueueGiveBackParams{Fence: zero, Claims: []storage.Claim{again.Claim()}, Lane: "lab/P2"}); err != nil || n != 1 {
		t.Fatalf("give back the current claim: %d, %v", n, err)
	}
	if r := h.queueRow(late[0]); r.Status != storage.QueuePending || r.Attempts != 1 {
		t.Fatalf("row %d given back: %+v; want pending at attempt 1", late[0], r)
	}
	if err := h.s.QueueRetry(h.ctx, storage.QueueRetryParams{Fence: zero, Claim: cur, Error: "refused"}); err != nil {
		t.Fatalf("retry the current claim: %v", err)
	}
	cur = h.mustClaim(zero, "lab/P1", time.Minute, ids[0]).Claim()
	if err := h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: zero, Claim: cur, Error: "AR"}); err != nil {
		t.Fatalf("hold the current claim: %v", err)
	}
	if _, err := h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[0]}); err != nil {
		t.Fatal(err)
	}
	cur = h.mustClaim(zero, "lab/P1", time.Minute, ids[0]).Claim()
	if err := h.s.QueueDead(h.ctx, storage.QueueDeadParams{Fence: zero, Claim: cur, Error: "AR"}); err != nil {
		t.Fatalf("set the current claim aside: %v", err)
	}
	cur = h.mustClaim(zero, "lab/P1", time.Minute, ids[1]).Claim()
	a, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: cur, Lane: "lab/P1", Owner: solo, LeaseTTL: time.Minute})
	if err != nil || !a.Completed || a.Next != nil {
		t.Fatalf("advance the current claim: %+v, %v; want completed, nothing next", a, err)
	}
}

// runIDs returns the ids of the rows an advance claimed, the next row's
// first: never their payloads, which a failure's message must not carry.
func runIDs(a storage.QueueAdvanced) []int64 {
	var ids []int64
	if a.Next != nil {
		ids = append(ids, a.Next.Row.ID)
	}
	for _, c := range a.Ahead {
		ids = append(ids, c.Row.ID)
	}
	return ids
}

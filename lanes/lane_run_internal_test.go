package lanes

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// sends records the queue ids an HTTP destination received, in order.
type sends struct {
	mu  sync.Mutex
	ids []string
}

func (s *sends) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, r.Header.Get(HeaderQueueID))
}

func (s *sends) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}

// queueIDs returns the fixture's row ids as the destination sees them, the
// ones at the given indexes repeated after themselves.
func (f *laneFixture) queueIDs(again ...int) []string {
	var ids []string
	for i, id := range f.ids {
		ids = append(ids, strconv.FormatInt(id, 10))
		if slices.Contains(again, i) {
			ids = append(ids, strconv.FormatInt(id, 10))
		}
	}
	return ids
}

// A row claimed ahead of the one being sent is sent only while its lease
// still covers a whole send (the destination's timeout) and more, as a head
// claimed afresh is: after that the rows left are given back and claimed
// again. A send that outlived its row's lease would be re-pended by the
// sweep and sent twice. Here the lease is 4 s and the timeout 3 s: rows may
// be taken for 0.5 s after their claim; sends of 0.4 s make a run outlast
// that. (The half-lease rule this replaces sent the run's fifth row with
// 2.8 s of its lease left.)
func TestARowClaimedAheadIsSentOnlyWhileItsLeaseCoversTheTimeout(t *testing.T) {
	const timeout = 3 * time.Second
	var (
		f        *laneFixture
		ready    = make(chan struct{})
		got      sends
		mu       sync.Mutex
		shortest = time.Hour
		requests atomic.Int64
	)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-ready
		id, _ := strconv.ParseInt(r.Header.Get(HeaderQueueID), 10, 64)
		if i := slices.Index(f.ids, id); i >= 0 {
			if exp := f.row(t, i).LeaseExpiresAt; exp != nil {
				mu.Lock()
				shortest = min(shortest, time.Until(*exp))
				mu.Unlock()
			}
		}
		if n := requests.Add(1); n >= 2 && n <= 7 {
			time.Sleep(400 * time.Millisecond)
		}
		got.add(r)
	}))
	defer dest.Close()
	const rows = 10
	f = newLaneFixture(t, dest.URL, "timeout_seconds = 3\n\n[store]\nlease_ttl_seconds = 4\n", rows)
	close(ready)
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "every row delivered", 30*time.Second, func() bool { return f.row(t, rows-1).Status == storage.QueueDone })
	if order, want := got.get(), f.queueIDs(); !slices.Equal(order, want) {
		t.Fatalf("sent %v; want each row once, in order: %v", order, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if shortest < timeout {
		t.Fatalf("a send began with %v left on its row's lease, less than the %v timeout", shortest.Round(time.Millisecond), timeout)
	}
	for i := range rows {
		if r := f.row(t, i); r.Attempts != 1 {
			t.Fatalf("row %d: %d attempts, want 1 (rows given back have their attempt taken back)", i, r.Attempts)
		}
	}
	if f.store.givenBack.Load() == 0 {
		t.Fatal("no row given back: the run never outlasted its window, and the test showed nothing")
	}
}

// A destination slower than the window in which rows claimed ahead may be
// taken gets no rows claimed ahead: they would only be claimed to be given
// back. Lease 4 s, timeout 3 s (a window of 0.5 s), sends of 0.6 s.
func TestALaneClaimsNoRowsAheadForADestinationSlowerThanTheirWindow(t *testing.T) {
	var got sends
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(600 * time.Millisecond)
		got.add(r)
	}))
	defer dest.Close()
	const rows = 4
	f := newLaneFixture(t, dest.URL, "timeout_seconds = 3\n\n[store]\nlease_ttl_seconds = 4\n", rows)
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "every row delivered", 30*time.Second, func() bool { return f.row(t, rows-1).Status == storage.QueueDone })
	if order, want := got.get(), f.queueIDs(); !slices.Equal(order, want) {
		t.Fatalf("sent %v; want %v", order, want)
	}
	if n := f.store.givenBack.Load(); n != 0 {
		t.Fatalf("%d rows claimed ahead and given back unsent", n)
	}
}

// When the write that sets a row of a run aside as dead finds the row's
// claim lost (its lease ran out and it is pending again: it is delivered
// again first), the rows claimed behind it are given back, not sent: a row
// sent after them would arrive out of order, and the lane's floor would
// have passed it, leaving it stranded.
func TestALaneGivesBackItsRunWhenItsDeadRowTurnsOutLost(t *testing.T) {
	var (
		got      sends
		requests atomic.Int64
	)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.add(r)
		if requests.Add(1) == 3 { // the third row, taken from a run: refused for good
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	defer dest.Close()
	const rows = 6
	f := newLaneFixture(t, dest.URL, `on_exhausted = "dead"`, rows, func(c *countingStore) { c.loseNextDead.Store(true) })
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "every row finished", 20*time.Second, func() bool { return f.row(t, rows-1).Status == storage.QueueDone })
	if order, want := got.get(), f.queueIDs(2); !slices.Equal(order, want) {
		t.Fatalf("sent %v; want %v: the lost row again, before any row behind it", order, want)
	}
	for i := range rows {
		if r, want := f.row(t, i), int64(1+btoi(i == 2)); r.Status != storage.QueueDone || r.Attempts != want {
			t.Fatalf("row %d: %s after %d attempts; want done after %d", i, r.Status, r.Attempts, want)
		}
	}
}

// When leadership falls in doubt right before a row is sent, the row and the
// rows claimed behind it go back, pending, their attempts taken back: none
// of them was sent. Then, trusted again, the lane delivers them in order,
// each at its first attempt.
func TestALaneInDoubtBeforeASendGivesBackTheRowAndItsRun(t *testing.T) {
	dest, requests := acceptingEverySend(t)
	const rows = 5
	var once sync.Once
	f := newLaneFixture(t, dest.URL, "", rows, func(c *countingStore) {
		c.afterAdvance = func(a storage.QueueAdvanced) {
			if len(a.Ahead) > 0 {
				// at the check right before the next send, once
				once.Do(func() { c.doubtOnce.Store(true) })
			}
		}
	})
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "every row delivered", 20*time.Second, func() bool { return f.row(t, rows-1).Status == storage.QueueDone })
	if n := requests.Load(); n != rows {
		t.Fatalf("%d sends for %d rows", n, rows)
	}
	if n := f.store.givenBack.Load(); n != rows-1 {
		t.Fatalf("%d rows given back; want the %d claimed by the write that recorded the first", n, rows-1)
	}
	for i := range rows {
		if r := f.row(t, i); r.Attempts != 1 {
			t.Fatalf("row %d: %d attempts, want 1", i, r.Attempts)
		}
	}
}

// A store call that fails while a lane holds rows claimed ahead leaves them
// in flight (it cannot know what the failed call did), but they were never
// sent: the lane gives them back, their attempt taken back, once the store
// answers again. Left in flight they came back only when their lease ran
// out, each with an attempt it never made, so that with a small
// max_attempts a row was set aside or held after fewer real sends.
func TestALaneGivesBackItsUnsentRunAfterAStoreFailure(t *testing.T) {
	dest, requests := acceptingEverySend(t)
	const rows = 12
	f := newLaneFixture(t, dest.URL, "timeout_seconds = 1\n\n[store]\nlease_ttl_seconds = 4\n", rows)
	defer f.system.Root.Stop(f.manager)
	// The first row is claimed alone, the second with a run behind it; the
	// second's completion then "fails" once the run is in hand.
	var armed atomic.Bool
	f.store.afterAdvance = func(a storage.QueueAdvanced) {
		if len(a.Ahead) > 0 && armed.CompareAndSwap(false, true) {
			f.store.failCompleteOnce.Store(true)
		}
	}

	waitUntil(t, "every row delivered", 60*time.Second, func() bool { return f.row(t, rows-1).Status == storage.QueueDone })
	if !armed.Load() || f.store.failCompleteOnce.Load() || requests.Load() < rows {
		t.Fatal("no completion failed: the test showed nothing")
	}
	for i := range rows {
		if r := f.row(t, i); r.Status != storage.QueueDone || r.Attempts != 1 {
			t.Fatalf("row %d: %s after %d attempts; want done at the first (a row claimed ahead and never sent used up an attempt)", i, r.Status, r.Attempts)
		}
	}
}

// A delivery whose record fails (the database away or full for a moment)
// is recorded again at the lane's next step, with the claim it was sent
// under, before the lane claims anything: the lane goes on in a second,
// and the message is not sent twice. Before, the row stayed in flight
// until its lease ran out (a minute by default), the whole lane waiting
// behind it, and was then sent again.
func TestADeliveryWhoseRecordFailedIsRecordedAgainNotSentAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		rows int // 1: the newest row, recorded alone (QueueComplete); else with the next claimed (QueueAdvance)
	}{{"recorded alone", 1}, {"recorded with the next claim", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			dest, requests := acceptingEverySend(t)
			f := newLaneFixture(t, dest.URL, "timeout_seconds = 1\n", tc.rows, func(c *countingStore) { c.failRecordOnce.Store(true) })
			defer f.system.Root.Stop(f.manager)

			waitUntil(t, "every row delivered and recorded", 15*time.Second, func() bool { return f.row(t, tc.rows-1).Status == storage.QueueDone })
			if f.store.failRecordOnce.Load() {
				t.Fatal("no record failed: the test showed nothing")
			}
			for i := range tc.rows {
				if r := f.row(t, i); r.Status != storage.QueueDone || r.Attempts != 1 {
					t.Fatalf("row %d: %s after %d attempts; want done at the first", i, r.Status, r.Attempts)
				}
			}
			if n := requests.Load(); n != int64(tc.rows) {
				t.Fatalf("%d sends for %d rows; want each sent once", n, tc.rows)
			}
		})
	}
}

// A failed send whose record fails (the database away or full for a
// moment) is recorded again at the lane's next step, a second later, under
// the claim it was sent with and before the lane claims anything else; the
// lane then goes on as the first record would have had it: a retry waits
// what is left of its backoff, counted from the first record, a held head
// holds the lane, a row set aside lets it move on. Each attempt is counted
// once. Before, nothing recorded it again: the lane's next claim found the
// row in flight under its own live lease, and the lane waited for that
// lease (lease_ttl_seconds, a minute by default) to run out; the row was
// then sent again at once, without its backoff, and after its last allowed
// attempt once more beyond max_attempts.
func TestAFailedSendWhoseRecordFailedIsRecordedAgain(t *testing.T) {
	// retry_base_seconds = retry_max_seconds: a backoff of 3.2 to 4 s.
	const backoff = 4 * time.Second
	for _, tc := range []struct {
		name, extra string
		sent        []int // the rows the destination gets, in order
	}{
		{"retry", "retry_base_seconds = 4\nretry_max_seconds = 4", []int{0, 0, 1}},
		{"hold", "max_attempts = 1", []int{0}},
		{"dead", "max_attempts = 1\non_exhausted = \"dead\"", []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu     sync.Mutex
				sentAt []time.Time
				got    sends
			)
			dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				sentAt = append(sentAt, time.Now())
				first := len(sentAt) == 1
				mu.Unlock()
				got.add(r)
				if first {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			}))
			defer dest.Close()
			sent := func(i int) time.Time {
				mu.Lock()
				defer mu.Unlock()
				return sentAt[i]
			}
			const rows = 2 // the second waits behind the first
			f := newLaneFixture(t, dest.URL, "timeout_seconds = 1\n"+tc.extra, rows, func(c *countingStore) { c.failFailureRecordOnce.Store(true) })
			defer f.system.Root.Stop(f.manager)

			// Well under the row's lease (lease_ttl_seconds, 60 by default).
			// The row is judged as this wait saw it: a retry's backoff
			// ends a few seconds after the record, and a read after it
			// could find the row claimed again (in flight, its next
			// attempt counted, updated since).
			var recorded storage.QueueRow
			waitUntil(t, "the failed send recorded", 15*time.Second, func() bool {
				recorded = f.row(t, 0)
				switch tc.name {
				case "retry":
					return recorded.Status == storage.QueuePending && recorded.LastError != ""
				case "hold":
					return recorded.Held
				}
				return recorded.Status == storage.QueueDead
			})
			if f.store.failFailureRecordOnce.Load() {
				t.Fatal("no record of a failed send failed: the test showed nothing")
			}
			// About a second, the lane's pause after a store failure; the
			// bound only tells it from the row's lease, a loaded machine
			// being slow.
			if took := time.Since(sent(0)); took > 20*time.Second {
				t.Fatalf("the failed send recorded %v after it; want about a second, the lane's pause after a store failure, not its lease", took)
			}
			if recorded.Attempts != 1 {
				t.Fatalf("row 0 recorded with %d attempts after one send, want 1", recorded.Attempts)
			}
			switch tc.name {
			case "retry":
				// Due when the first record would have made it due: the
				// backoff counts from the first send, not from the record
				// made again later.
				// Measured from the first record's try, which the lane
				// counts from; counted from the one made again (1.5 s or
				// more later) it would be due later than the backoff.
				r := recorded
				first := time.Unix(0, f.store.failedFailureRecordAt.Load())
				if due := r.NextAttemptAt.Sub(first); due < backoff*8/10-100*time.Millisecond {
					t.Fatalf("row 0 due %v after the first try to record its failed send; want its backoff, 3.2 to 4 s", due)
				}
				// The record made again (its updated_at) comes
				// failedRecordTakes (1.5 s) or more after the first try,
				// as that try took so long to fail, so the row is due less
				// than the shortest backoff after it; counted from it, it
				// would be due 3.2 s or more after. (A bound on due above,
				// from the first try, failed on a loaded machine, its
				// statement run 110 ms after the time it counts from.)
				if left := r.NextAttemptAt.Sub(r.UpdatedAt); left >= backoff*8/10 {
					t.Fatalf("row 0 due %v after the record made again; want less than the shortest backoff, 3.2 s: the backoff counts from the first try", left)
				}
				waitUntil(t, "every row delivered", 15*time.Second, func() bool { return f.row(t, rows-1).Status == storage.QueueDone })
				if again := sent(1).Sub(sent(0)); again < backoff*8/10-100*time.Millisecond {
					t.Fatalf("row 0 sent again %v after its failed send; want no sooner than its backoff, 3.2 to 4 s", again)
				}
			case "hold":
				waitUntil(t, "the lane parked behind its held head", 15*time.Second, func() bool { return f.inspect(t).parked[fixtureLane] })
			case "dead":
				waitUntil(t, "the row behind delivered", 15*time.Second, func() bool { return f.row(t, rows-1).Status == storage.QueueDone })
			}
			var want []string
			for _, i := range tc.sent {
				want = append(want, strconv.FormatInt(f.ids[i], 10))
			}
			if got := got.get(); !slices.Equal(got, want) {
				t.Fatalf("the destination got %v, want %v", got, want)
			}
			wantAttempts := map[string][rows]int64{"retry": {2, 1}, "hold": {1, 0}, "dead": {1, 1}}[tc.name]
			for i := range rows {
				if r := f.row(t, i); r.Attempts != wantAttempts[i] {
					t.Fatalf("row %d: %s after %d attempts, want %d", i, r.Status, r.Attempts, wantAttempts[i])
				}
			}
			if n := f.store.failureRecords.Load(); n != 2 {
				t.Fatalf("%d records of the failed send, want 2 (the one that failed, then the one made again)", n)
			}
		})
	}
}

// A write that claims rows and commits, but whose reply is lost (the
// connection reset during the COMMIT: PostgreSQL restarting or failing over,
// a proxy restarting), leaves the rows it claimed in flight under this
// node's lease, unknown to the lane. The lane gives them back before its
// next claim (QueueReleaseOwn) and delivers them at once, each sent once,
// its attempt counted once. Before, its next claim found its head in flight
// under its own live lease, found nothing, and the lane waited for that
// lease (lease_ttl_seconds, a minute by default) to run out; the rows then
// came back with an attempt never made. On PostgreSQL one lost COMMIT is
// every lane of the batch.
func TestALaneWhoseClaimsReplyWasLostGivesBackWhatItClaimed(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(*countingStore)
	}{
		// Row 0 delivered; the advance that records it claims rows 1 and 2.
		{"advance", func(c *countingStore) { c.failAdvanceAfterCommitOnce.Store(true) }},
		// The lane's first claim takes row 0.
		{"claim", func(c *countingStore) { c.failClaimAfterCommitOnce.Store(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest, requests := acceptingEverySend(t)
			const rows = 3
			f := newLaneFixture(t, dest.URL, "timeout_seconds = 1\n", rows, tc.lose)
			defer f.system.Root.Stop(f.manager)
			start := time.Now()
			// Well under the rows' lease (lease_ttl_seconds, 60 by default).
			for f.row(t, rows-1).Status != storage.QueueDone && time.Since(start) < 15*time.Second {
				time.Sleep(10 * time.Millisecond)
			}
			took := time.Since(start).Round(time.Millisecond)
			for i := range rows {
				r := f.row(t, i)
				t.Logf("row %d: %s, %d attempts, lease owner %q", i, r.Status, r.Attempts, r.LeaseOwner)
			}
			t.Logf("%d sends, %d rows given back by QueueReleaseOwn, after %v", requests.Load(), f.store.releasedOwn.Load(), took)
			if f.store.failAdvanceAfterCommitOnce.Load() || f.store.failClaimAfterCommitOnce.Load() {
				t.Fatal("no reply was lost: the test showed nothing")
			}
			for i := range rows {
				if r := f.row(t, i); r.Status != storage.QueueDone || r.Attempts != 1 {
					t.Fatalf("row %d: %s after %d attempts, %v after the lane started; want done at the first, at once (the lane waited for the lease of rows it had claimed without hearing so)", i, r.Status, r.Attempts, took)
				}
			}
			if n := requests.Load(); n != rows {
				t.Fatalf("%d sends for %d rows; want each sent once", n, rows)
			}
			want := int64(2) // rows 1 and 2, claimed by the advance
			if tc.name == "claim" {
				want = 1 // row 0
			}
			if n := f.store.releasedOwn.Load(); n != want {
				t.Fatalf("%d rows given back by QueueReleaseOwn, want %d", n, want)
			}
			if !strings.Contains(f.logs.String(), `"rows":`+strconv.FormatInt(want, 10)+`,"message":"gave back messages that a claim whose answer was lost`) {
				t.Fatalf("no INFO line says how many rows were given back:\n%s", f.logs.String())
			}
		})
	}
}

package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/messagefoundry/mf/storage"
)

// The lanes' claims and completions, combined across lanes.
//
// Every delivering lane writes once per row (QueueAdvance: complete the
// head, claim the next). One transaction per lane write would make
// PostgreSQL's per-transaction cost (a WAL flush, a round trip, the fence)
// the engine's delivery rate, and on a small machine that runs out long
// before the disk does. So the writes that arrive while a batch is in flight
// wait and go together into the next one: one pipelined round trip, one
// implicit transaction, one fence check and one commit, however many lanes
// take part. With one lane it degenerates to one write per transaction.
//
// Why combining keeps each lane's guarantees:
//   - A lane has one write outstanding at a time (its actor waits for it),
//     so the lanes of one batch are distinct and no two batches in flight
//     touch the same lane's rows: their row locks cannot deadlock each other.
//   - The completions run before the claims, so a lane's own completed head
//     is done when its next head is looked for (QueueAdvance's order).
//   - All writes of a batch carry the same fence; writes under another
//     fence (an old graph still winding down) wait for a batch of their own.
//   - A failure of the batch (a lost fence, a lost connection) aborts its
//     whole transaction: every write in it fails and none took effect. A
//     write that the database refuses alone (a row lock held too long, an
//     operator's trigger) aborts it too, and then fails alone: the others
//     run again in a new transaction (run, failedAlone).
//     Nothing a write can find (a lost claim, an empty lane) is a failure.
//   - No caller hears of success before the batch's COMMIT.
//
// A row lock held by another session (an operator's open UPDATE of a queue
// row, a reporting tool's SELECT ... FOR UPDATE) must not stall every lane:
// a write that waits for one would hold its whole batch, and every lane's
// next write queues behind that batch. So a batch's writes wait at most
// laneLockWait for a row lock (lock_timeout, set after the fence, so that the
// fence still waits as long as it must for a table lock, which holds every
// write alike). The write that runs out fails alone, as its own store error:
// its lane tries again a second later (lanes/lane.go, storeFailed), and the
// rest of the batch runs again at once, a new transaction in which nothing
// of the first took effect; there the writes wait at most lockWaitAgain
// for a row lock, so that an UPDATE left open over many lanes' rows costs
// the batch one laneLockWait, not one for each of those lanes. The lane and
// rows of that write are then kept aside (asideSet), as are those of any
// write the database refuses alone (failedAlone: an operator's trigger that
// raises, say): their writes go to a batcher of their own, one batch in
// flight, so that each of their retries fails there and not in front of the
// other lanes. They come back asideFor after their last refusal, not at
// their first write that succeeds: a lane whose one locked row lies ahead of
// its head succeeds with its head alone and runs out again once it claims a
// run of rows that reaches that row.
// The two batchers touch distinct lanes, so their row locks cannot deadlock
// each other (and a deadlock with anything else is run again, below). A
// write's failure makes pgx forget the batch's prepared statements, so the
// batch that runs again prepares them anew: a cost paid only while a write
// is refused.

// maxLaneBatch bounds the writes of one batch, so that a long queue does not
// make one transaction (and its callers' wait) arbitrarily long.
const maxLaneBatch = 256

// maxLaneBatchesInFlight is how many batches may be in flight at once. One:
// the next batch's writes gather while one runs. On the 2-core machine of
// the README's figures (measured with an earlier, set-based form of the
// lane statements), one gave 6,008 rows/s delivered, two 4,426 and four
// 3,761: concurrent batches only contend for the same CPUs, and each one
// carries fewer writes. (Two claims of one lane in one batch, which the
// engine never sends, would still be safe: the second finds the head the
// first one claimed in flight.)
const maxLaneBatchesInFlight = 1

// laneLockWait is how long a lane's write waits for a row lock held by
// another session before it fails alone (see above). Long beside a batch
// (milliseconds), short beside a lane's retry (a second): the wait it takes
// from every other lane in the batch happens once, since the locked lane's
// retries are kept aside. And shorter than PostgreSQL's deadlock_timeout (1 s
// by default), so that in a deadlock with another session's statement (an
// operator's UPDATE of many lanes' rows, which locks them in its own order)
// the batch gives way before that statement's deadlock check makes it the
// victim: with a wait of 1 s the failover suite's open UPDATE of every
// unfinished row was the one aborted, once in three runs.
const laneLockWait = 500 * time.Millisecond

// lockWaitAgain bounds the row lock waits of a batch that runs again after
// one of its writes ran out of laneLockWait: a session that holds one lane's
// rows locked often holds others' too.
const lockWaitAgain = 50 * time.Millisecond

// asideFor is how long a lane or row stays aside after the database last
// refused a write of it alone. One that is still locked (or refused) after
// that, with no write of it refused meanwhile, costs the other lanes one
// more laneLockWait (or run) and is set aside again; one whose lock has gone
// spends that long in the batches of the lanes set aside.
const asideFor = 10 * time.Second

// noted is the error and detail to record on giveBack[i]
// (storage.QueueGiveBackParams.Noted).
func (w *laneWrite) noted(i int) (errorText, detail string) {
	return storage.QueueGiveBackParams{Error: w.noteError, Detail: w.noteDetail}.Noted(i)
}

// laneWrite is one lane's write: give back claims, complete a claim, claim
// the lane's head (and rows ahead of it), in that order, any of them.
type laneWrite struct {
	ctx      context.Context
	fence    storage.Fence
	giveBack []storage.Claim
	// noteError and noteDetail: why the first of giveBack wrote nothing
	// (storage.QueueGiveBackParams.Error), "" for no note.
	noteError, noteDetail string
	complete              *storage.Claim // nil: nothing to complete
	lane                  string         // "": nothing to claim
	of                    string         // the lane of giveBack and complete, when the caller gave it
	ahead                 int            // rows behind the head to claim with it
	from                  int64          // the claim's floor (storage.QueueClaimNextParams.From)
	owner                 string
	ttl                   time.Duration

	// Outcome, set by the batch before done is signalled.
	givenBack int64
	completed bool
	next      *storage.QueueClaim
	nextAhead []storage.QueueClaim
	err       error
	// done carries true when the write has its outcome, and false when its
	// caller is to lead the next batch (at most once: see handed).
	done chan bool
	// handed is set, under the batcher's lock, when the write is handed
	// the lead; from then on it may not be withdrawn, since its caller owes
	// the batcher that lead.
	handed bool
}

// laneBatcher gathers lane writes into batches.
type laneBatcher struct {
	s *Store
	// lockWait bounds a write's wait for a row lock (laneLockWait; tests
	// lengthen it).
	lockWait time.Duration
	// kept names the lanes and rows set aside; aside is the batcher that
	// takes their writes (nil in that batcher itself). Both batchers share
	// kept.
	kept  *asideSet
	aside *laneBatcher

	mu       sync.Mutex
	queue    []*laneWrite
	inFlight int
	// batches and writes count what ran, for tests.
	batches, writes atomic.Int64
}

// newLaneBatchers returns the batcher of the lanes' writes, with the one for
// the writes set aside behind it.
func newLaneBatchers(s *Store) *laneBatcher {
	kept := &asideSet{}
	return &laneBatcher{s: s, lockWait: laneLockWait, kept: kept,
		aside: &laneBatcher{s: s, lockWait: laneLockWait, kept: kept}}
}

// do runs w in a batch and returns once its outcome is durable (or failed).
func (lb *laneBatcher) do(w *laneWrite) {
	if lb.aside != nil && lb.kept.holds(w, time.Now()) {
		lb.aside.do(w)
		return
	}
	w.done = make(chan bool, 1)
	lb.mu.Lock()
	lb.queue = append(lb.queue, w)
	lead := lb.inFlight < maxLaneBatchesInFlight
	if lead {
		lb.inFlight++
	}
	lb.mu.Unlock()
	for {
		if lead {
			lb.lead()
		}
		select {
		case finished := <-w.done:
			if finished {
				return
			}
			lead = true // handed the lead: w is at the front of the queue
		case <-w.ctx.Done():
			if lb.withdraw(w) {
				w.err = w.ctx.Err()
				return
			}
			// A batch has it, or it has just been handed the lead: its
			// outcome (or its lead) is still to come.
			if finished := <-w.done; finished {
				return
			}
			lead = true
		}
	}
}

// withdraw takes w out of the queue if no batch has taken it yet and it has
// not been handed the lead.
func (lb *laneBatcher) withdraw(w *laneWrite) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if w.handed {
		return false
	}
	for i, q := range lb.queue {
		if q == w {
			lb.queue = append(lb.queue[:i:i], lb.queue[i+1:]...)
			return true
		}
	}
	return false
}

// lead runs one batch from the front of the queue, then hands the lead to
// the next waiting write, or gives the slot back if there is none.
func (lb *laneBatcher) lead() {
	lb.mu.Lock()
	batch := lb.take()
	lb.mu.Unlock()
	if len(batch) > 0 {
		lb.batches.Add(1)
		lb.writes.Add(int64(len(batch)))
		lb.run(batch)
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, w := range lb.queue {
		if !w.handed {
			// Its caller leads the next batch. Its done is empty: it is
			// in no batch yet, and it has not been handed the lead before.
			w.handed = true
			w.done <- false
			return
		}
	}
	lb.inFlight--
}

// take removes the next batch from the queue: up to maxLaneBatch writes
// with the fence of the first one. Callers hold lb.mu.
func (lb *laneBatcher) take() []*laneWrite {
	if len(lb.queue) == 0 {
		return nil
	}
	fence := lb.queue[0].fence
	var batch, rest []*laneWrite
	for _, w := range lb.queue {
		if w.fence == fence && len(batch) < maxLaneBatch {
			batch = append(batch, w)
		} else {
			rest = append(rest, w)
		}
	}
	lb.queue = rest
	return batch
}

// run executes batch and signals every write's outcome. A deadlock (with
// the sweep or promotion recovery, which lock many rows in their own order)
// aborts the whole transaction, so the batch is simply run again. A write
// that the database refuses alone (failedAlone: one that ran out of its
// wait for a row lock, or one that a trigger refuses) fails alone and is
// set aside, and the rest run again at once (see the top of this file):
// one lane's refused write must not hold up every lane.
func (lb *laneBatcher) run(batch []*laneWrite) {
	// The transaction serves several callers: it is cancelled only once
	// every one of them has given up, since cancelling it fails them all.
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	waiting := len(batch)
	var mu sync.Mutex
	stops := make(map[*laneWrite]func() bool, len(batch))
	for _, w := range batch {
		stops[w] = context.AfterFunc(w.ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if waiting--; waiting == 0 {
				cancel()
			}
		})
	}
	// finish signals w's outcome; a caller that has it waits no more (and
	// when it was the last one waiting, what is left is run for no one).
	finish := func(w *laneWrite) {
		if stops[w]() {
			mu.Lock()
			if waiting--; waiting == 0 {
				cancel()
			}
			mu.Unlock()
		}
		w.done <- true
	}
	var err error
	wait := lb.lockWait
	for attempt := 1; ; attempt++ {
		err = lb.exec(ctx, batch, wait)
		if w, locked := failedAlone(err); w != nil {
			lb.kept.add(w, time.Now())
			if locked {
				err = fmt.Errorf("%w; it waited %s for a row lock that another session holds (an open transaction that updated or locked a queue row: find it with pg_blocking_pids in pg_stat_activity)", err, wait)
				wait = min(wait, lockWaitAgain)
			}
			w.completed, w.next, w.nextAhead, w.givenBack = false, nil, nil, 0
			w.err = fmt.Errorf("%w; its lane tries again, the other lanes go on", err)
			finish(w)
			batch = slices.DeleteFunc(batch, func(b *laneWrite) bool { return b == w })
			if len(batch) == 0 {
				return
			}
			attempt = 0
			continue
		}
		var pgErr *pgconn.PgError
		if attempt < 3 && errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			continue
		}
		break
	}
	for _, w := range batch {
		if err != nil {
			w.completed, w.next, w.err = false, nil, err
		}
		finish(w)
	}
}

// writeError is the failure of one write's statement in a batch.
type writeError struct {
	w   *laneWrite
	err error
}

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// failedAlone returns the write whose own statement failed in err, when
// the failure is that write's alone: the server refused its statement for
// a row lock held longer than the lock wait (locked, SQLSTATE 55P03), or for
// its rows (refusedRows, the ingest's refusals), or for what the ingest does
// not take as the message's own but a lane may: a unique violation and a
// corrupt row or index page (XX001, XX002). The lane only tries again, where
// a message refused is answered AR and not sent again. Anything else (the
// connection, the server's resources or shutdown, a cancel, a deadlock,
// which is run again, a privilege revoked, a statement the server no longer
// has prepared) would meet every write alike, and is the whole batch's.
func failedAlone(err error) (w *laneWrite, locked bool) {
	var we *writeError
	var pgErr *pgconn.PgError
	if !errors.As(err, &we) || !errors.As(err, &pgErr) {
		return nil, false
	}
	switch c := pgErr.Code; {
	case c == "55P03":
		return we.w, true
	case c == "23505", c == "XX001", c == "XX002", refusedRows(c):
		return we.w, false
	}
	return nil, false
}

// exec sends the batch as one pipelined implicit transaction: the fence,
// then every completion, then every claim, one statement each (see
// queue_complete.sql for why not one statement for all).
func (lb *laneBatcher) exec(ctx context.Context, batch []*laneWrite, lockWait time.Duration) error {
	var giveBacks, completes, claims []*laneWrite
	for _, w := range batch {
		// A re-run after a deadlock starts afresh.
		w.givenBack, w.completed, w.next, w.nextAhead = 0, false, nil, nil
		if len(w.giveBack) > 0 {
			giveBacks = append(giveBacks, w)
		}
		if w.complete != nil {
			completes = append(completes, w)
		}
		if w.lane != "" {
			claims = append(claims, w)
		}
	}
	return lb.s.fencedBatch(ctx, batch[0].fence, func(b *pgx.Batch) {
		// After the fence, whose table locks may take as long as they must.
		b.Queue(queries.Get("lanes_lock_wait"), fmt.Sprintf("%dms", lockWait.Milliseconds()))
		for _, w := range giveBacks {
			for i, c := range w.giveBack {
				e, d := w.noted(i)
				b.Queue(queries.Get("queue_give_back"), c.ID, c.Owner, c.Attempt, e, d)
			}
		}
		for _, w := range completes {
			b.Queue(queries.Get("queue_complete"), w.complete.ID, w.complete.Owner, w.complete.Attempt)
		}
		for _, w := range claims {
			b.Queue(queries.Get("queue_claim_next"), w.lane, w.owner, storage.Seconds(w.ttl), w.from, 1+w.ahead)
		}
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("set the lanes' lock wait: %w", err)
		}
		for _, w := range giveBacks {
			for _, c := range w.giveBack {
				tag, err := br.Exec()
				if err != nil {
					return &writeError{w, fmt.Errorf("give back row %d: %w", c.ID, err)}
				}
				w.givenBack += tag.RowsAffected()
			}
		}
		for _, w := range completes {
			tag, err := br.Exec()
			if err != nil {
				return &writeError{w, fmt.Errorf("complete row %d: %w", w.complete.ID, err)}
			}
			w.completed = tag.RowsAffected() == 1
		}
		for _, w := range claims {
			run, err := scanRun(br)
			if err != nil {
				return &writeError{w, fmt.Errorf("claim a lane's next row (from row %d): %w", w.from, err)} // not the lane: its key is often a patient id
			}
			if len(run) > 0 {
				w.next, w.nextAhead = &run[0], run[1:]
			}
		}
		return nil
	})
}

// scanRun reads a lane claim's rows (queue_claim_next.sql), in id order.
func scanRun(br pgx.BatchResults) ([]storage.QueueClaim, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var run []storage.QueueClaim
	for rows.Next() {
		var c storage.QueueClaim
		if err := rows.Scan(append(queueRowDest(&c.Row), &c.Payload, &c.ControlID, &c.AttemptsAtRetry)...); err != nil {
			return nil, err
		}
		run = append(run, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(run, func(a, b storage.QueueClaim) int { return cmp.Compare(a.Row.ID, b.Row.ID) })
	return run, nil
}

// asideSet names the lanes and rows whose writes the database refused alone
// lately (see the top of this file), each with when it last did.
type asideSet struct {
	mu     sync.Mutex
	lanes  map[string]time.Time
	rows   map[int64]time.Time
	pruned time.Time // when holds last forgot what was set aside too long ago
}

// rowsOf lists the rows w names before it runs: those it gives back or
// completes.
func rowsOf(w *laneWrite) []int64 {
	ids := make([]int64, 0, len(w.giveBack)+1)
	for _, c := range w.giveBack {
		ids = append(ids, c.ID)
	}
	if w.complete != nil {
		ids = append(ids, w.complete.ID)
	}
	return ids
}

// laneOf is the lane w writes in, "" when unknown.
func laneOf(w *laneWrite) string {
	if w.lane != "" {
		return w.lane
	}
	return w.of
}

// add sets aside w's lane and rows.
func (ls *asideSet) add(w *laneWrite, now time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.lanes == nil {
		ls.lanes, ls.rows = map[string]time.Time{}, map[int64]time.Time{}
	}
	if lane := laneOf(w); lane != "" {
		ls.lanes[lane] = now
	}
	for _, id := range rowsOf(w) {
		ls.rows[id] = now
	}
}

// holds reports whether w touches a lane or row set aside, forgetting those
// set aside longer than asideFor ago.
func (ls *asideSet) holds(w *laneWrite, now time.Time) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.lanes) == 0 && len(ls.rows) == 0 {
		return false
	}
	if now.Sub(ls.pruned) > time.Second {
		ls.pruned = now
		for lane, at := range ls.lanes {
			if now.Sub(at) > asideFor {
				delete(ls.lanes, lane)
			}
		}
		for id, at := range ls.rows {
			if now.Sub(at) > asideFor {
				delete(ls.rows, id)
			}
		}
	}
	if lane := laneOf(w); lane != "" {
		if _, ok := ls.lanes[lane]; ok {
			return true
		}
	}
	for _, id := range rowsOf(w) {
		if _, ok := ls.rows[id]; ok {
			return true
		}
	}
	return false
}

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// Writes that queue while the writer is busy go into one transaction: the
// fenced ones fail alone, the others are all committed, and a write whose
// caller gave up before it was taken is not written at all.
func TestWritesAreGroupCommittedAndFailAlone(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	ingest := func(ctx context.Context, f storage.Fence, id string) (int64, error) {
		res, err := s.MessageIngest(ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{{
			Inbound: "in", ControlID: id, Payload: []byte("MSH|^~\\&|" + id), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/x"}},
		}}})
		if err != nil {
			return 0, err
		}
		return res[0].MessageID, nil
	}

	s.writer <- struct{}{} // hold the writer: everything below queues
	const n = 40
	type outcome struct {
		id     int64
		err    error
		fenced bool
	}
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := storage.Fence{} // the zero fence: valid on a never-elected lease
			if i%4 == 3 {
				f = storage.Fence{Owner: "someone-else", Term: 7}
			}
			out[i].fenced = f.Term != 0
			out[i].id, out[i].err = ingest(ctx, f, "M")
		}()
	}
	gone, cancel := context.WithCancel(ctx)
	var goneErr error
	wg.Add(1)
	go func() { defer wg.Done(); _, goneErr = ingest(gone, storage.Fence{}, "GONE") }()
	waitQueued(t, s, n+1)
	cancel()
	waitQueued(t, s, n) // the cancelled write withdrew itself
	before := s.commits.Load()
	<-s.writer // let them go
	wg.Wait()

	if got := s.commits.Load() - before; got != 1 {
		t.Fatalf("%d queued writes took %d transactions, want 1", n, got)
	}
	if !errors.Is(goneErr, context.Canceled) {
		t.Fatalf("the withdrawn write returned %v", goneErr)
	}
	for i, o := range out {
		switch {
		case o.fenced && !errors.Is(o.err, storage.ErrFenced):
			t.Fatalf("write %d with a stale fence: %v", i, o.err)
		case !o.fenced && o.err != nil:
			t.Fatalf("write %d: %v (a neighbour's failure must not undo it)", i, o.err)
		case !o.fenced:
			if _, err := s.MessageRead(ctx, o.id); err != nil {
				t.Fatalf("write %d was acknowledged but message %d is not there: %v", i, o.id, err)
			}
		}
	}
	lanes, err := s.QueueLanes(ctx, storage.QueueLanesParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(lanes) != 1 || lanes[0].Depth != n-n/4 {
		t.Fatalf("lanes %+v: want one lane of %d rows (no fenced or withdrawn write stored)", lanes, n-n/4)
	}
}

// A write that fails rolls back alone. The batch's first attempt, without
// savepoints, is rolled back whole, and the batch runs again with a
// savepoint per write; a write that changed nothing (unchanged) costs no
// second attempt.
func TestAFailedWriteOfAGroupCommitRollsBackAlone(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	failure := errors.New("the write failed after its insert")
	put := func(name string, runs *int, result error) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			*runs++
			if _, err := tx.ExecContext(ctx, "INSERT INTO mf_config (name, version) VALUES (?, 1)", name); err != nil {
				return err
			}
			return result
		}
	}
	nothing := func(runs *int) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error { *runs++; return unchanged{storage.ErrNoWork} }
	}
	// batch queues fns in order behind the held writer, lets them go as
	// one transaction, and returns each one's outcome.
	batch := func(fns ...func(tx *sql.Tx) error) []error {
		s.writer <- struct{}{}
		errs := make([]error, len(fns))
		var wg sync.WaitGroup
		for i, fn := range fns {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = s.write(ctx, fn) }()
			waitQueued(t, s, i+1)
		}
		before := s.commits.Load()
		<-s.writer
		wg.Wait()
		if got := s.commits.Load() - before; got != 1 {
			t.Fatalf("%d writes took %d transactions, want 1", len(fns), got)
		}
		return errs
	}
	stored := func(name string) bool {
		var n int
		if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM mf_config WHERE name = ?", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	var a, none, b int
	errs := batch(put("a", &a, nil), nothing(&none), put("b", &b, nil))
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], storage.ErrNoWork) {
		t.Fatalf("outcomes %v: want nil, ErrNoWork, nil", errs)
	}
	if _, wrapped := errs[1].(unchanged); wrapped {
		t.Fatalf("the caller got %#v: unchanged is the group commit's business", errs[1])
	}
	if a != 1 || none != 1 || b != 1 {
		t.Fatalf("runs %d %d %d: a write that changed nothing made the batch run again", a, none, b)
	}
	if !stored("a") || !stored("b") {
		t.Fatal("a write beside one that changed nothing was not committed")
	}

	var c, d, none2, e int
	errs = batch(put("c", &c, nil), put("d", &d, failure), nothing(&none2), put("e", &e, nil))
	if errs[0] != nil || !errors.Is(errs[1], failure) || !errors.Is(errs[2], storage.ErrNoWork) || errs[3] != nil {
		t.Fatalf("outcomes %v: want nil, the failure, ErrNoWork, nil", errs)
	}
	if _, wrapped := errs[2].(unchanged); wrapped {
		t.Fatalf("the caller got %#v from the attempt with savepoints", errs[2])
	}
	if c != 2 || d != 2 || none2 != 1 || e != 1 {
		t.Fatalf("runs %d %d %d %d: want 2 2 1 1 (the first attempt stops at the failure, the second runs all)", c, d, none2, e)
	}
	if !stored("c") || stored("d") || !stored("e") {
		t.Fatalf("stored c %v, d %v, e %v: want the failed write's insert alone rolled back", stored("c"), stored("d"), stored("e"))
	}
}

// openMigrated opens a migrated store on a fresh file, closed at the end
// of the test.
func openMigrated(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		q := len(s.queue)
		s.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// One fence check serves consecutive writes of a group commit, but not
// across a write that may change the lease: a write queued behind another
// node's election, in the same transaction, is checked again and fenced.
func TestAGroupCommitChecksTheFenceAgainAfterALeaseWrite(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	a, won, err := s.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "a", TTL: time.Minute})
	if err != nil || !won {
		t.Fatalf("elect a: won %v, %v", won, err)
	}
	oldTerm := storage.Fence{Owner: "a", Term: a.Term}
	newTerm := storage.Fence{Owner: "b", Term: a.Term + 1}

	s.writer <- struct{}{} // hold the writer: everything below queues, in order
	var wg sync.WaitGroup
	errs := make([]error, 5)
	queued := 0
	enqueue := func(i int, write func() error) {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = write() }()
		queued++
		waitQueued(t, s, queued)
	}
	ingest := func(f storage.Fence) func() error {
		return func() error {
			_, err := s.MessageIngest(ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{{
				Inbound: "in", ControlID: "M", Payload: []byte("MSH|^~\\&|M"), Status: storage.MessageUnrouted,
			}}})
			return err
		}
	}
	enqueue(0, ingest(oldTerm))
	enqueue(1, func() error {
		_, err := s.LeaseResign(ctx, storage.LeaseResignParams{Owner: "a", Term: a.Term})
		return err
	})
	enqueue(2, func() error {
		l, won, err := s.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "b", TTL: time.Minute})
		if err == nil && (!won || l.Term != newTerm.Term) {
			err = fmt.Errorf("elect b: won %v at term %d, want term %d", won, l.Term, newTerm.Term)
		}
		return err
	})
	enqueue(3, ingest(oldTerm))
	enqueue(4, ingest(newTerm))
	before := s.commits.Load()
	<-s.writer
	wg.Wait()

	if got := s.commits.Load() - before; got != 1 {
		t.Fatalf("the queued writes took %d transactions, want 1", got)
	}
	for i, want := range []error{nil, nil, nil, storage.ErrFenced, nil} {
		if (want == nil && errs[i] != nil) || (want != nil && !errors.Is(errs[i], want)) {
			t.Errorf("write %d: %v, want %v", i, errs[i], want)
		}
	}
}

// A group commit whose COMMIT fails stored nothing, so none of its writes
// may report success: an ingest told nil is answered AA and its message,
// rolled back, is lost. The COMMIT here fails on a deferred foreign key
// that a write of the batch broke (SQLite checks those only at COMMIT).
func TestAFailedCommitFailsEveryWriteOfTheBatch(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE t_parent (id INTEGER PRIMARY KEY);
		CREATE TABLE t_child (p INTEGER REFERENCES t_parent (id) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}

	s.writer <- struct{}{} // hold the writer: both writes below share one transaction
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, errs[0] = s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
			Inbound: "in", ControlID: "M1", Payload: []byte("MSH|^~\\&|M1"), Status: storage.MessageUnrouted,
		}}})
	}()
	waitQueued(t, s, 1)
	go func() {
		defer wg.Done()
		errs[1] = s.write(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO t_child (p) VALUES (42)")
			return err
		})
	}()
	waitQueued(t, s, 2)
	<-s.writer
	wg.Wait()

	var stored int
	if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM mf_messages").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != 0 {
		t.Fatalf("%d messages stored by a batch whose COMMIT failed, want 0", stored)
	}
	for i, err := range errs {
		if err == nil {
			t.Errorf("write %d of a batch whose COMMIT failed (nothing stored) reported success", i)
		}
	}
	// Nor may the failed COMMIT leave its connection inside the transaction.
	if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
		Inbound: "in", ControlID: "M2", Payload: []byte("MSH|^~\\&|M2"), Status: storage.MessageUnrouted,
	}}}); err != nil {
		t.Fatalf("an ingest after a failed COMMIT: %v", err)
	}
}

// A group commit that cannot even begin (another process holds SQLite's
// write lock past busy_timeout) stored nothing: its writes fail, and no
// ingest among them is told it was stored.
func TestABatchThatCannotBeginFailsItsWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mf.db")
	s, err := Open(ctx, Options{Path: path, BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	hold, err := other.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
		Inbound: "in", ControlID: "M1", Payload: []byte("MSH|^~\\&|M1"), Status: storage.MessageUnrouted,
	}}})
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		t.Fatal("an ingest whose transaction could not begin (the write lock held elsewhere) reported success")
	}
	var stored int
	if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM mf_messages").Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("%d messages stored (%v), want 0", stored, err)
	}
}

// panicked runs f and returns what it panicked with, or nil.
func panicked(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// within waits for done up to d, failing the test if it is not closed by then.
func within(t *testing.T, d time.Duration, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still waiting after %v", what, d)
	}
}

func ingestOne(ctx context.Context, s *Store, id string) (int64, error) {
	res, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
		Inbound: "in", ControlID: id, Payload: []byte("MSH|^~\\&|" + id), Status: storage.MessageUnrouted,
	}}})
	if err != nil {
		return 0, err
	}
	return res[0].MessageID, nil
}

// A write whose function panics (QueueResendDead's route evaluation runs
// inside the writer) and is recovered upstream, as net/http and the actor
// system do, must not wedge the store: its panic kept the writer token and
// the transaction, and every later write of the process waited until its
// context expired.
func TestAPanicInAWriteDoesNotWedgeTheWriter(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	v := panicked(func() {
		_ = s.write(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO mf_config (name, version) VALUES ('bug', 1)"); err != nil {
				return err
			}
			panic("a bug in a write's function")
		})
	})
	if v == nil {
		t.Fatal("the write's panic was not seen by its caller")
	}

	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = ingestOne(ctx, s, "AFTER")
	}()
	within(t, 10*time.Second, "an ingest after a write that panicked", done)
	if err != nil {
		t.Fatalf("an ingest after a write that panicked (recovered): %v; want it stored", err)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM mf_config WHERE name = 'bug'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v) of the write that panicked were stored, want 0", n, err)
	}
}

// With flat combining one caller runs every queued write's function: a
// panic in caller A's function is A's, raised on A's goroutine, and caller
// B's write in the same batch is committed. It surfaced on whichever
// goroutine held the writer token, B's included, and the other waited for
// ever.
func TestAPanicInAWriteIsItsOwnCallers(t *testing.T) {
	for round := range 10 { // either caller may take the writer token
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s := openMigrated(t)
		s.writer <- struct{}{} // hold the writer: A and B share one batch
		var (
			aPanic, bPanic any
			bID            int64
			bErr           error
			aDone, bDone   = make(chan struct{}), make(chan struct{})
		)
		go func() {
			defer close(aDone)
			aPanic = panicked(func() {
				_ = s.write(ctx, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, "INSERT INTO mf_config (name, version) VALUES ('a', 1)"); err != nil {
						return err
					}
					panic("A's bug")
				})
			})
		}()
		waitQueued(t, s, 1)
		go func() {
			defer close(bDone)
			bPanic = panicked(func() { bID, bErr = ingestOne(ctx, s, "B") })
		}()
		waitQueued(t, s, 2)
		before := s.commits.Load()
		<-s.writer
		within(t, 10*time.Second, fmt.Sprintf("round %d: caller B", round), bDone)
		within(t, 10*time.Second, fmt.Sprintf("round %d: caller A", round), aDone)
		cancel()

		if bPanic != nil {
			t.Fatalf("round %d: caller B panicked with %v: A's panic, on B's goroutine", round, bPanic)
		}
		p, ok := aPanic.(*WritePanic)
		if !ok || p.Value != "A's bug" || !strings.Contains(p.Error(), "A's bug") {
			t.Fatalf("round %d: caller A panicked with %#v; want its own panic (*WritePanic of \"A's bug\")", round, aPanic)
		}
		if bErr != nil {
			t.Fatalf("round %d: B's ingest beside A's panic: %v; want it stored", round, bErr)
		}
		if got := s.commits.Load() - before; got != 1 {
			t.Fatalf("round %d: the batch took %d commits, want 1", round, got)
		}
		if _, err := s.MessageRead(context.Background(), bID); err != nil {
			t.Fatalf("round %d: B's message was acknowledged but is not there: %v", round, err)
		}
		var n int
		if err := s.DB().QueryRow("SELECT count(*) FROM mf_config WHERE name = 'a'").Scan(&n); err != nil || n != 0 {
			t.Fatalf("round %d: %d rows (%v) of A's write that panicked were stored, want 0", round, n, err)
		}
	}
}

// Close waits for the write transaction running before it closes the
// database and releases the process lock, and refuses the writes after it:
// database/sql's Close does not wait for connections in use, so the lock
// went while this process's last write still committed, and another engine
// could take the file under it.
func TestCloseWaitsForTheRunningWriteBeforeReleasingTheLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "mf.db")
	s, err := Open(ctx, Options{Path: path, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	running, finish := make(chan struct{}), make(chan struct{})
	var writeErr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		writeErr = s.write(ctx, func(tx *sql.Tx) error {
			close(running)
			<-finish
			_, err := tx.ExecContext(ctx, "INSERT INTO mf_config (name, version) VALUES ('last', 1)")
			return err
		})
	}()
	<-running
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		l, lerr := lockFile(path)
		if lerr == nil {
			l.release()
		}
		t.Fatalf("Close returned (%v) while a write transaction was still running (another process could take the lock: %v)", err, lerr == nil)
	case <-time.After(300 * time.Millisecond):
	}
	if l, err := lockFile(path); err == nil {
		l.release()
		t.Fatal("the process lock was released while a write transaction was still running")
	}
	close(finish)
	within(t, 10*time.Second, "the running write", written)
	if writeErr != nil {
		t.Fatalf("the write running at Close: %v; want it committed", writeErr)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting after the running write ended")
	}
	if err := s.write(ctx, func(tx *sql.Tx) error { return nil }); !errors.Is(err, errClosed) {
		t.Fatalf("a write after Close: %v; want errClosed", err)
	}

	s, err = Open(ctx, Options{Path: path, Exclusive: true})
	if err != nil {
		t.Fatalf("open after Close: %v", err)
	}
	defer s.Close()
	var n int
	if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM mf_config WHERE name = 'last'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the write committed before Close: %d rows (%v), want 1", n, err)
	}
}

// A write that never ends does not keep Close from closing: it waits the
// busy timeout and closeGrace, then closes without it; a write queued
// behind it fails instead of waiting for ever.
func TestCloseDoesNotWaitForAStuckWriteForEver(t *testing.T) {
	shortenCloseGrace(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "mf.db"), BusyTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	running, stuck := make(chan struct{}), make(chan struct{})
	defer close(stuck)
	go func() {
		_ = s.write(ctx, func(tx *sql.Tx) error { close(running); <-stuck; return nil })
	}()
	<-running
	queued := make(chan error, 1)
	go func() { queued <- s.write(context.Background(), func(tx *sql.Tx) error { return nil }) }()
	waitQueued(t, s, 1)
	closed := make(chan struct{})
	go func() { defer close(closed); s.Close() }()
	within(t, 10*time.Second, "Close beside a stuck write", closed)
	select {
	case err := <-queued:
		if !errors.Is(err, errClosed) {
			t.Fatalf("a write queued at Close: %v; want errClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write queued at Close still waiting after Close")
	}
}

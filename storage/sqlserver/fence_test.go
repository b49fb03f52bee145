package sqlserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlserver"
)

// The fence and the lease renewal on SQL Server (migration 0012): a fenced
// write holds the term row, which only an election writes, not the lease
// row, which the renewal updates. Before, the fence held the lease row
// shared, the renewal waited behind every fenced write in progress, and a
// write that waited on anything fenced the primary. These run only against
// a real server (MF_TEST_SQLSERVER_URL), in both READ_COMMITTED_SNAPSHOT
// modes; to see who waits for whom they read sys.dm_exec_requests, which
// shows other sessions' requests to a login with VIEW SERVER STATE.

// A row lock on a queue row, held by a session left open (an operator's
// UPDATE in SSMS, not yet committed), makes the lane write that needs the
// row wait, but not the lease renewal, and the write waits at most
// laneLockWait: it then fails with SQL Server's lock timeout (1222), its
// connection back in the pool, for its lane to try again later; once the
// lock has gone, the lane's next claim goes through. With the fence on the
// lease row, the renewal waited behind the write, the primary fenced
// itself, and the nodes took turns leading for as long as the session
// stayed open; with no bound on the write's wait, five such lanes held the
// whole pool, and no ingest got a connection.
func TestARowLockHoldsALaneWriteButNotTheRenewal(t *testing.T) {
	inBothModes(t, func(t *testing.T, ctx context.Context, s *sqlserver.Store, db *sql.DB, _ string, l storage.Lease) {
		f := storage.Fence{Owner: l.Owner, Term: l.Term}
		if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{{
			Inbound: "in", ControlID: "M1", MessageType: "ADT^A01", Payload: []byte("MSH|^~\\&|M1"), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/x"}},
		}}}); err != nil {
			t.Fatal(err)
		}
		claim := func() error {
			_, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: f, Lane: "d/x", Owner: "o", LeaseTTL: time.Minute})
			return err
		}

		operator, spid := openSession(t, ctx, db)
		if _, err := operator.ExecContext(ctx, "UPDATE mf_queue SET last_error = N'looked at by hand' WHERE lane = N'd/x'"); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		began := time.Now()
		go func() { done <- claim() }()
		until(t, ctx, fmt.Sprintf("the claim waiting on the operator's session %d", spid), func() bool {
			select {
			case err := <-done:
				t.Fatalf("the claim ended (%v) before it was seen waiting on the operator's session; want it to wait", err)
			default:
			}
			return blockedBy(t, ctx, db, spid)
		})

		within(t, ctx, "the lease renewal while a lane's claim waits on an operator's row lock", func(ctx context.Context) error {
			_, err := s.LeaseAttemptRenew(ctx, storage.LeaseAttemptRenewParams{Owner: l.Owner, Term: l.Term, TTL: time.Minute})
			return err
		})
		select {
		case err := <-done:
			waited := time.Since(began)
			if !sqlserver.LockTimedOut(err) || errors.Is(err, storage.ErrFenced) || errors.Is(err, storage.ErrClaimLost) {
				t.Fatalf("the claim on the operator's locked row: %v; want it to give up on its lock wait (error 1222), a store error its lane tries again", err)
			}
			if waited < sqlserver.LaneLockWait*8/10 {
				t.Errorf("the claim gave up after %s; want about %s", waited, sqlserver.LaneLockWait)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the claim still waits for the operator's row lock after 5 s; want it to give up after %s", sqlserver.LaneLockWait)
		}
		if err := operator.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := claim(); err != nil {
			t.Fatalf("the lane's next claim once the row lock went: %v", err)
		}
	})
}

// A lane statement's SET LOCK_TIMEOUT ends with its batch (sp_executesql):
// the connection it ran on waits for locks without end again afterwards,
// so that nothing else run on it (an ingest, the fence) is cut short.
func TestALaneStatementsLockWaitEndsWithItsBatch(t *testing.T) {
	inBothModes(t, func(t *testing.T, ctx context.Context, s *sqlserver.Store, _ *sql.DB, _ string, _ storage.Lease) {
		during, after, err := s.LockTimeoutAroundALaneStatement(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if during != sqlserver.LaneLockWait.Milliseconds() || after != -1 {
			t.Fatalf("@@LOCK_TIMEOUT %d in the lane statement's batch and %d after it, on the same connection; want %d, then -1 (no bound)",
				during, after, sqlserver.LaneLockWait.Milliseconds())
		}
	})
}

// An election still waits for every fenced write in progress, and the
// write's term ends only once it has committed: the election's trigger
// needs the term row exclusively, which the fence holds shared to commit. A
// renewal, a resignation and an election attempt that elects nobody change
// neither owner nor term, leave the term row alone and do not wait. After
// the election, a write of the old term is refused and one of the new term
// goes through: the trigger moved the term row.
func TestAnElectionWaitsForTheFencedWritesInProgress(t *testing.T) {
	inBothModes(t, func(t *testing.T, ctx context.Context, s *sqlserver.Store, db *sql.DB, dbURL string, l storage.Lease) {
		other := openStore(t, dbURL) // the standby, node b

		write, spid := openSession(t, ctx, db)
		var one int
		if err := write.QueryRowContext(ctx, sqlserver.FenceQuery, sql.Named("owner", l.Owner), sql.Named("term", l.Term)).Scan(&one); err != nil {
			t.Fatalf("the fence of term %d: %v", l.Term, err)
		}
		if _, err := write.ExecContext(ctx, "UPDATE mf_config SET version = version + 1 WHERE name = N'queue'"); err != nil {
			t.Fatal(err)
		}

		within(t, ctx, "a renewal while a fenced write is in progress", func(ctx context.Context) error {
			_, err := s.LeaseAttemptRenew(ctx, storage.LeaseAttemptRenewParams{Owner: l.Owner, Term: l.Term, TTL: time.Minute})
			return err
		})
		within(t, ctx, "an election attempt on the live lease while a fenced write is in progress", func(ctx context.Context) error {
			nl, elected, err := other.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "b", TTL: time.Minute})
			if err == nil && (elected || nl.Term != l.Term) {
				err = fmt.Errorf("elected %v, lease %+v; want the live lease of term %d left as it is", elected, nl, l.Term)
			}
			return err
		})
		within(t, ctx, "a resignation while a fenced write is in progress", func(ctx context.Context) error {
			resigned, err := s.LeaseResign(ctx, storage.LeaseResignParams{Owner: l.Owner, Term: l.Term})
			if err == nil && !resigned {
				err = errors.New("not resigned")
			}
			return err
		})

		type outcome struct {
			l       storage.Lease
			elected bool
			err     error
		}
		elected := make(chan outcome, 1)
		go func() {
			nl, ok, err := other.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "b", TTL: time.Minute})
			elected <- outcome{nl, ok, err}
		}()
		until(t, ctx, fmt.Sprintf("the election waiting on the write's session %d", spid), func() bool {
			select {
			case o := <-elected:
				t.Fatalf("the election ended (%+v) while a write of term %d was in progress; want it to wait for the write", o, l.Term)
			default:
			}
			return blockedBy(t, ctx, db, spid)
		})
		if err := write.Commit(); err != nil {
			t.Fatalf("the write of term %d, begun before the election: %v", l.Term, err)
		}
		o := <-elected
		if o.err != nil || !o.elected || o.l.Owner != "b" || o.l.Term != l.Term+1 {
			t.Fatalf("the election once the write committed: %+v", o)
		}

		record := func(st *sqlserver.Store, f storage.Fence) error {
			return st.QueueLaneKeyRecord(ctx, storage.QueueLaneKeyRecordParams{Fence: f, Destination: "d", LaneKey: "in=PID-3.1"})
		}
		if err := record(s, storage.Fence{Owner: l.Owner, Term: l.Term}); !errors.Is(err, storage.ErrFenced) {
			t.Fatalf("a write of term %d after the election: %v, want storage.ErrFenced", l.Term, err)
		}
		if err := record(other, storage.Fence{Owner: o.l.Owner, Term: o.l.Term}); err != nil {
			t.Fatalf("a write of the new term %d: %v; want it done (the election's trigger moves the term row)", o.l.Term, err)
		}
	})
}

// inBothModes runs test twice, with READ_COMMITTED_SNAPSHOT off and on, each
// time on a migrated database of its own where node a has been elected:
// test gets a's store, a plain handle onto the database (for the other
// sessions it opens), its URL and a's lease.
func inBothModes(t *testing.T, test func(t *testing.T, ctx context.Context, s *sqlserver.Store, db *sql.DB, dbURL string, l storage.Lease)) {
	server := serverURL(t)
	for _, snapshot := range []bool{false, true} {
		name := "ReadCommittedLocking"
		if snapshot {
			name = "ReadCommittedSnapshot"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, db, dbURL, l := leaderStore(t, ctx, server, snapshot)
			test(t, ctx, s, db, dbURL, l)
		})
	}
}

func leaderStore(t *testing.T, ctx context.Context, server string, snapshot bool) (*sqlserver.Store, *sql.DB, string, storage.Lease) {
	t.Helper()
	dbURL := testDatabase(t, server, snapshot)
	s := openStore(t, dbURL)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	l, elected, err := s.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "a", TTL: time.Minute})
	if err != nil || !elected {
		t.Fatalf("elect a: elected %v, %v", elected, err)
	}
	db, err := sql.Open("sqlserver", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return s, db, dbURL, l
}

// openSession begins a transaction on a connection of its own, as another
// client would, and returns it with its session id; it is rolled back at
// the end of the test if still open.
func openSession(t *testing.T, ctx context.Context, db *sql.DB) (*sql.Tx, int64) {
	t.Helper()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	var spid int64
	if err := tx.QueryRowContext(ctx, "SELECT @@SPID").Scan(&spid); err != nil {
		t.Fatal(err)
	}
	return tx, spid
}

// blockedBy reports whether a request waits for a lock that session spid
// holds.
func blockedBy(t *testing.T, ctx context.Context, db *sql.DB, spid int64) bool {
	t.Helper()
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT_BIG(*) FROM sys.dm_exec_requests WHERE blocking_session_id = @spid",
		sql.Named("spid", spid)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// until polls cond every 10 ms until it holds, failing the test at ctx's
// deadline.
func until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s (a login without VIEW SERVER STATE sees no other session in sys.dm_exec_requests)", what)
		case <-tick.C:
		}
	}
}

// within runs call with 3 s to finish: one that waits for a lock of the
// transaction in progress would wait until that transaction ends.
func within(t *testing.T, ctx context.Context, what string, call func(ctx context.Context) error) {
	t.Helper()
	cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
	defer ccancel()
	if err := call(cctx); err != nil {
		t.Fatalf("%s: %v; want it done at once", what, err)
	}
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A maintenance statement's lock on mf_queue or mf_messages (VACUUM FULL,
// ALTER TABLE, a plain REINDEX) makes the primary's writes wait, but not
// its lease renewal: a write waits for the tables before it takes the
// fence's lock on the lease row, so the renewal (an UPDATE of that
// row) has nothing to wait behind, and the primary keeps leading through
// the maintenance instead of fencing itself. Once the lock goes, the write
// commits; a write that waited through an election is refused by the fence
// it takes after the wait.
func TestAMaintenanceLockHoldsWritesButNotTheRenewal(t *testing.T) {
	writes := []struct {
		name string
		do   func(ctx context.Context, s *Store, f storage.Fence) error
	}{
		{"ingest", func(ctx context.Context, s *Store, f storage.Fence) error {
			_, err := s.MessageIngest(ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{{
				Inbound: "in", ControlID: "M2", Payload: []byte("MSH|^~\\&|M2"), Status: storage.MessageRouted,
				Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/x"}},
			}}})
			return err
		}},
		{"lane claim", func(ctx context.Context, s *Store, f storage.Fence) error {
			_, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: f, Lane: "d/x", Owner: "o", LeaseTTL: time.Minute})
			if errors.Is(err, storage.ErrNoWork) {
				return nil // the lane is empty: the claim ran all the same
			}
			return err
		}},
		{"purge", func(ctx context.Context, s *Store, f storage.Fence) error {
			_, err := s.MessagePurge(ctx, storage.MessagePurgeParams{Fence: f, OlderThan: time.Hour})
			return err
		}},
	}
	for _, table := range []string{"mf_queue", "mf_messages"} {
		for _, w := range writes {
			t.Run(table+"/"+w.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				s, other, l := leaderStore(t, ctx)
				f := storage.Fence{Owner: l.Owner, Term: l.Term}
				// Once before the lock, as a running engine has: its
				// connection has the statements prepared (a first Parse
				// waits for the lock outside any transaction).
				if err := w.do(ctx, s, f); err != nil {
					t.Fatal(err)
				}

				unlock := lockTable(t, ctx, other, table)
				done := make(chan error, 1)
				go func() { done <- w.do(ctx, s, f) }()
				waitForLockWait(t, ctx, other, table)

				rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := other.LeaseAttemptRenew(rctx, storage.LeaseAttemptRenewParams{Owner: l.Owner, Term: l.Term, TTL: time.Minute})
				rcancel()
				if err != nil {
					t.Fatalf("the lease renewal while a %s waits on a lock of %s: %v; want it renewed at once", w.name, table, err)
				}
				select {
				case err := <-done:
					t.Fatalf("the %s finished while %s was locked: %v", w.name, table, err)
				default:
				}
				unlock()
				if err := <-done; err != nil {
					t.Fatalf("the %s once the lock went: %v", w.name, err)
				}
			})
		}
	}

	t.Run("an election meanwhile", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, other, l := leaderStore(t, ctx)
		f := storage.Fence{Owner: l.Owner, Term: l.Term}
		if err := writes[0].do(ctx, s, f); err != nil {
			t.Fatal(err)
		}
		unlock := lockTable(t, ctx, other, "mf_queue")
		done := make(chan error, 1)
		go func() { done <- writes[0].do(ctx, s, f) }()
		waitForLockWait(t, ctx, other, "mf_queue")
		if _, err := other.LeaseResign(ctx, storage.LeaseResignParams{Owner: l.Owner, Term: l.Term}); err != nil {
			t.Fatal(err)
		}
		if _, elected, err := other.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "b", TTL: time.Minute}); err != nil || !elected {
			t.Fatalf("another node's election while the write waits: elected %v, %v", elected, err)
		}
		unlock()
		if err := <-done; !errors.Is(err, storage.ErrFenced) {
			t.Fatalf("a write of term %d that waited through an election: %v, want storage.ErrFenced", l.Term, err)
		}
	})
}

// A lane's claim that waited for a maintenance lock (the fence's table
// locks wait as long as they must) gets its whole lease from when it
// writes: counted from its transaction's start, before the wait, a lease of
// 2 s after a wait of 3 s was committed already expired, and the sweep
// re-pended the row the lane was about to send (a duplicate).
func TestAClaimThatWaitedForALockGetsItsWholeLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, other, l := leaderStore(t, ctx)
	f := storage.Fence{Owner: l.Owner, Term: l.Term}
	if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{{
		Inbound: "in", ControlID: "M1", Payload: []byte("MSH|^~\\&|M1"), Status: storage.MessageRouted,
		Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/x"}},
	}}}); err != nil {
		t.Fatal(err)
	}
	// The claim prepared, as in a running engine: a first call prepares it
	// before its transaction begins, and that waits for the lock instead.
	if _, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: f, Lane: "d/none", Owner: "o", LeaseTTL: time.Minute}); !errors.Is(err, storage.ErrNoWork) {
		t.Fatalf("claim of an empty lane: %v; want ErrNoWork", err)
	}
	unlock := lockTable(t, ctx, other, "mf_queue")
	type claimed struct {
		c   storage.QueueClaim
		err error
	}
	done := make(chan claimed, 1)
	const ttl = 2 * time.Second
	go func() {
		c, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: f, Lane: "d/x", Owner: "o", LeaseTTL: ttl})
		done <- claimed{c, err}
	}()
	waitForLockWait(t, ctx, other, "mf_queue")
	time.Sleep(3 * time.Second) // the maintenance holds its lock longer than the TTL
	unlock()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	var dbNow time.Time
	if err := other.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	if left := r.c.Row.LeaseExpiresAt.Sub(dbNow); left < ttl/2 {
		t.Fatalf("the claim's lease had %s left when the claim returned; want about its TTL, %s", left, ttl)
	}
	if n, err := other.QueueReclaimExpired(ctx, storage.QueueReclaimExpiredParams{Fence: f}); err != nil || n != 0 {
		t.Fatalf("the sweep re-pended %d rows (%v); want none: the row was just claimed", n, err)
	}
	if err := s.QueueComplete(ctx, storage.QueueCompleteParams{Fence: f, Claim: r.c.Claim(), Lane: "d/x"}); err != nil {
		t.Fatalf("completing the row sent: %v", err)
	}
}

// leaderStore opens two stores on a migrated schema of their own whose
// lease is held by owner "a": s, of one connection, for the writes, and
// other for everything else.
func leaderStore(t *testing.T, ctx context.Context) (s, other *Store, l storage.Lease) {
	t.Helper()
	url := pgtest.NewSchema(t)
	for _, o := range []struct {
		s    **Store
		size int32
	}{{&s, 1}, {&other, 3}} {
		st, err := Open(ctx, Options{URL: url, PoolSize: o.size})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		*o.s = st
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l, elected, err := other.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "a", TTL: time.Minute})
	if err != nil || !elected {
		t.Fatalf("elect: %v %v", elected, err)
	}
	return s, other, l
}

// lockTable takes table in ACCESS EXCLUSIVE mode on a connection of its own,
// as VACUUM FULL would, and returns the release.
func lockTable(t *testing.T, ctx context.Context, s *Store, table string) (unlock func()) {
	t.Helper()
	tx, _ := openSession(t, ctx, s)
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// waitForLockWait returns once a session waits for a lock on table.
func waitForLockWait(t *testing.T, ctx context.Context, s *Store, table string) {
	t.Helper()
	until(t, ctx, "a write waiting for the lock on "+table, func() bool { return waitingOn(t, ctx, s, table) > 0 })
}

// waitingOn counts the sessions that wait for a lock on table.
func waitingOn(t *testing.T, ctx context.Context, s *Store, table string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = $1::regclass`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// until polls cond every 10 ms until it holds, and fails the test when ctx
// ends first.
func until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// The leader lease has a connection of its own: when every connection of
// the pool is held (here by reads waiting on a maintenance lock, as an API
// client polling /lanes would hold them), an election, a renewal and a
// resignation still run at once, instead of waiting for a connection past
// the trust window.
func TestTheLeaseDoesNotWaitForTheBusyPool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewSchema(t)
	s, err := Open(ctx, Options{URL: url, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() }) // after the lock's release (cleanups run last first)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := Open(ctx, Options{URL: url, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })

	unlock := lockTable(t, ctx, other, "mf_queue")
	readers := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.QueueStats(ctx)
			readers <- err
		}()
	}
	until(t, ctx, "both of the pool's connections waiting for the lock", func() bool { return waitingOn(t, ctx, other, "mf_queue") == 2 })

	within := func(what string, call func(ctx context.Context) error) {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		defer ccancel()
		if err := call(cctx); err != nil {
			t.Fatalf("%s with every connection of the pool busy: %v; want it done at once", what, err)
		}
	}
	var l storage.Lease
	within("an election", func(ctx context.Context) (err error) {
		l, _, err = s.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "a", TTL: time.Minute})
		return err
	})
	within("a renewal", func(ctx context.Context) error {
		_, err := s.LeaseAttemptRenew(ctx, storage.LeaseAttemptRenewParams{Owner: "a", Term: l.Term, TTL: time.Minute})
		return err
	})
	within("a resignation", func(ctx context.Context) error {
		_, err := s.LeaseResign(ctx, storage.LeaseResignParams{Owner: "a", Term: l.Term})
		return err
	})
	unlock()
	for range 2 {
		if err := <-readers; err != nil {
			t.Fatalf("a read once the lock went: %v", err)
		}
	}
}

// A migration takes mf_messages and mf_queue before it changes either, in
// the order the fence takes them, so that it cannot deadlock with a write
// of a primary still running (a rolling upgrade). Migration 0004 alters
// mf_queue, then locks mf_messages to drop the foreign key's triggers:
// taken in that order, with a write holding mf_messages and about to take
// mf_queue (the fence's order), each waited for the other, and PostgreSQL
// broke the deadlock by failing one of them.
func TestAMigrationTakesTheTablesInTheFencesOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, other, _ := leaderStore(t, ctx)
	// 0004 pending again, with the foreign key it drops back in place.
	for _, q := range []string{
		`ALTER TABLE mf_queue ADD CONSTRAINT mf_queue_message_id_fkey FOREIGN KEY (message_id) REFERENCES mf_messages (id)`,
		`DELETE FROM mf_schema_migrations WHERE version = 4`,
	} {
		if _, err := other.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// A write of the running primary, between the fence's two tables.
	conn, err := pgx.ConnectConfig(ctx, other.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	w, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Rollback(ctx)
	if _, err := w.Exec(ctx, "LOCK TABLE mf_messages IN ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	migrated := make(chan error, 1)
	go func() { migrated <- s.Migrate(ctx) }()
	for {
		var waiting bool
		if err := other.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND relation IN ('mf_messages'::regclass, 'mf_queue'::regclass))`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-migrated:
			t.Fatalf("the migration ended (%v) while a write held mf_messages", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := w.Exec(ctx, "LOCK TABLE mf_queue IN ROW EXCLUSIVE MODE"); err != nil {
		t.Fatalf("the write's second table, with the migration waiting: %v", err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("the migration once the write committed: %v", err)
	}
	var fk bool
	if err := other.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'mf_queue_message_id_fkey')`).Scan(&fk); err != nil || fk {
		t.Fatalf("migration 0004 not applied: the foreign key is still there (%v)", err)
	}
}

// A row lock on a queue row, held by a session left open (an operator's
// UPDATE in psql, not yet committed), makes the lane write that needs the
// row wait, but not the lease renewal: the fence holds the lease row FOR
// KEY SHARE, which a renewal's UPDATE of expires_at does not wait for
// (migration 0009). With FOR SHARE, the renewal waited behind the write,
// the primary fenced itself, and the nodes took turns leading for as long
// as the session stayed open.
func TestARowLockHoldsALaneWriteButNotTheRenewal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, other, l := leaderStore(t, ctx)
	s.lanes.lockWait = time.Minute // the claim waits for the operator here (TestALockedRowHoldsUpOnlyItsOwnLane: not for long)
	f := storage.Fence{Owner: l.Owner, Term: l.Term}
	claim := func(lane string) error {
		_, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: f, Lane: lane, Owner: "o", LeaseTTL: time.Minute})
		if errors.Is(err, storage.ErrNoWork) {
			return nil
		}
		return err
	}
	if err := claim("d/empty"); err != nil { // the statements prepared, as in a running engine
		t.Fatal(err)
	}
	if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{{
		Inbound: "in", ControlID: "M1", Payload: []byte("MSH|^~\\&|M1"), Status: storage.MessageRouted,
		Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/x"}},
	}}}); err != nil {
		t.Fatal(err)
	}

	operator, pid := openSession(t, ctx, other)
	if _, err := operator.Exec(ctx, "UPDATE mf_queue SET last_error = 'looked at by hand' WHERE lane = 'd/x'"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- claim("d/x") }()
	waitForBlockedBy(t, ctx, other, pid)

	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := other.LeaseAttemptRenew(rctx, storage.LeaseAttemptRenewParams{Owner: l.Owner, Term: l.Term, TTL: time.Minute})
	rcancel()
	if err != nil {
		t.Fatalf("the lease renewal while a lane's claim waits on an operator's row lock: %v; want it renewed at once", err)
	}
	if err := operator.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the claim once the row lock went: %v", err)
	}
}

// An election still waits for every fenced write in progress, and the
// write's term ends only once it has committed: the fence's FOR KEY SHARE
// conflicts with the election's UPDATE, since it changes term, a column of
// a unique index (a key column). A renewal and a resignation change no key
// column, and do not wait.
func TestAnElectionWaitsForTheFencedWritesInProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, other, l := leaderStore(t, ctx)
	write, pid := openSession(t, ctx, other)
	if _, err := write.Exec(ctx, "SELECT mf_fence($1, $2)", l.Owner, l.Term); err != nil {
		t.Fatal(err)
	}
	if _, err := write.Exec(ctx, "UPDATE mf_config SET version = version + 1 WHERE name = 'queue'"); err != nil {
		t.Fatal(err)
	}

	within := func(what string, call func(ctx context.Context) error) {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		defer ccancel()
		if err := call(cctx); err != nil {
			t.Fatalf("%s while a fenced write is in progress: %v; want it done at once", what, err)
		}
	}
	within("a renewal", func(ctx context.Context) error {
		_, err := other.LeaseAttemptRenew(ctx, storage.LeaseAttemptRenewParams{Owner: l.Owner, Term: l.Term, TTL: time.Minute})
		return err
	})
	within("a resignation", func(ctx context.Context) error {
		_, err := other.LeaseResign(ctx, storage.LeaseResignParams{Owner: l.Owner, Term: l.Term})
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
	until(t, ctx, "the election waiting for the write", func() bool {
		select {
		case o := <-elected:
			t.Fatalf("the election ended (%+v) while a write of term %d was in progress; want it to wait for the write", o, l.Term)
		default:
		}
		return blockedBy(t, ctx, other, pid)
	})
	if err := write.Commit(ctx); err != nil {
		t.Fatalf("the write of term %d, begun before the election: %v", l.Term, err)
	}
	o := <-elected
	if o.err != nil || !o.elected || o.l.Term != l.Term+1 {
		t.Fatalf("the election once the write committed: %+v", o)
	}
	err := other.fenced(ctx, storage.Fence{Owner: l.Owner, Term: l.Term}, func(pgx.Tx) error { return nil })
	if !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("a write of term %d after the election: %v, want storage.ErrFenced", l.Term, err)
	}
}

// openSession begins a transaction on a connection of its own, as another
// client would, and returns it with its server process id; it is rolled
// back at the end of the test if still open.
func openSession(t *testing.T, ctx context.Context, s *Store) (pgx.Tx, uint32) {
	t.Helper()
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tx.Rollback(context.Background())
		_ = conn.Close(context.Background())
	})
	return tx, conn.PgConn().PID()
}

// waitForBlockedBy returns once a session waits for a lock that the
// session of process pid holds.
func waitForBlockedBy(t *testing.T, ctx context.Context, s *Store, pid uint32) {
	t.Helper()
	until(t, ctx, fmt.Sprintf("a session waiting on the session of process %d", pid), func() bool { return blockedBy(t, ctx, s, pid) })
}

// blockedBy reports whether a session waits for a lock that the session of
// process pid holds.
func blockedBy(t *testing.T, ctx context.Context, s *Store, pid uint32) bool {
	t.Helper()
	var blocked bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))`, pid).Scan(&blocked); err != nil {
		t.Fatal(err)
	}
	return blocked
}

// The lease's connection is opened on first use only, even when the url
// asks the pool to keep idle connections (pool_min_idle_conns): a single
// node, which never elects, opens none.
func TestTheLeasesConnectionIsOpenedOnFirstUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Options{URL: pgtest.NewSchema(t) + "&pool_min_idle_conns=1", PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	until(t, ctx, "the pool's idle connection", func() bool { return s.pool.Stat().TotalConns() >= 1 })
	if n := s.lease.Stat().TotalConns(); n != 0 {
		t.Fatalf("the lease has %d connections before any lease call; want 0", n)
	}
}

// An upgrade from a schema before 0008, with the old primary still
// writing: its fence takes the lease row first and the tables after, the
// migrations take the tables first and the lease table after (0009's
// index), and the old primary's renewal, waiting on the row, holds the
// lease table. The three wait in a ring, and PostgreSQL fails one of them;
// here the migrations (the other two sessions look for deadlocks only
// after 10 s). The migrations then roll back and are tried again, and go
// through once the old write is done; before, the upgrade stopped with
// "deadlock detected".
func TestMigrationsThatDeadlockWithAnOlderPrimaryAreTriedAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, other, l := leaderStore(t, ctx)
	// The schema as 0007 left it: the fence of 0003, no index on term.
	for _, q := range []string{
		`CREATE OR REPLACE FUNCTION mf_fence(p_owner text, p_term bigint) RETURNS integer
		 LANGUAGE plpgsql AS $$
		 BEGIN
		     PERFORM 1 FROM mf_leader_lease WHERE name = 'leader' AND owner = p_owner AND term = p_term FOR SHARE;
		     IF NOT FOUND THEN
		         RAISE EXCEPTION 'fenced' USING ERRCODE = 'MF001';
		     END IF;
		     RETURN 1;
		 END $$`,
		`DROP INDEX mf_leader_lease_term`,
		`DELETE FROM mf_schema_migrations WHERE version IN (8, 9)`,
	} {
		if _, err := other.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	slow := func(tx pgx.Tx) {
		t.Helper()
		if _, err := tx.Exec(ctx, "SET LOCAL deadlock_timeout = '10s'"); err != nil {
			t.Fatal(err)
		}
	}

	// A write of the old primary under way on mf_queue: the migrations
	// take mf_messages and wait for it.
	x, xpid := openSession(t, ctx, other)
	if _, err := x.Exec(ctx, "LOCK TABLE mf_queue IN ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() { migrated <- s.Migrate(ctx) }()
	waitForBlockedBy(t, ctx, other, xpid)

	// The old primary's next write: its fence takes the lease row, then it
	// waits for mf_messages, which the migrations hold.
	w, wpid := openSession(t, ctx, other)
	slow(w)
	if _, err := w.Exec(ctx, "SELECT mf_fence($1, $2)", l.Owner, l.Term); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := w.Exec(ctx, "LOCK TABLE mf_messages IN ROW EXCLUSIVE MODE")
		if err == nil {
			err = w.Commit(ctx)
		}
		wrote <- err
	}()
	// Its renewal (lease_attempt_renew.sql) waits for the write's share
	// lock on the row, holding the lease table.
	r, _ := openSession(t, ctx, other)
	slow(r)
	renewed := make(chan error, 1)
	go func() {
		_, err := r.Exec(ctx, queries.Get("lease_attempt_renew"), l.Owner, l.Term, 60.0)
		if err == nil {
			err = r.Commit(ctx)
		}
		renewed <- err
	}()
	waitForBlockedBy(t, ctx, other, wpid)

	// The first write ends: the migrations go on to 0009's index, which
	// waits for the renewal, which waits for the write, which waits for the
	// migrations.
	if err := x.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("the migrations: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the old primary's write: %v", err)
	}
	if err := <-renewed; err != nil {
		t.Fatalf("the old primary's renewal: %v", err)
	}
	var n int
	if err := other.pool.QueryRow(ctx, `SELECT count(*) FROM mf_schema_migrations WHERE version IN (8, 9)`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("migrations 8 and 9 applied: %d (%v); want both", n, err)
	}
}

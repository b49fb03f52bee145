// Package sqlserver is the SQL Server dialect of storage.Store, on
// github.com/microsoft/go-mssqldb through database/sql. Its SQL lives in the
// embedded sql/ and migrations/ files; the FIFO argument of the lane claim,
// and why it holds with READ_COMMITTED_SNAPSHOT on or off, is beside
// sql/queue_claim_next.sql.
//
// Several nodes may share one SQL Server database: this is a clustered store.
// It needs SQL Server 2016 or later (or Azure SQL): DATEDIFF_BIG, THROW and
// 1,700-byte nonclustered index keys. The login must be able to create tables
// and types in its default schema (Migrate) and use them afterwards.
//
// This dialect has been exercised only where a SQL Server was available: its
// conformance tests (storagetest) run when MF_TEST_SQLSERVER_URL is set, and
// are skipped otherwise, as in CI.
//
// Where T-SQL differs from PostgreSQL the behaviour is kept the same:
//
//   - The fence is a HOLDLOCK read of mf_leader_term, a copy of the lease's
//     owner and term that a trigger moves in an election's transaction
//     (migrations/0012_fence_spares_the_renewal.sql), so that the renewal,
//     which updates the lease row only, waits for no fenced write (FOR KEY
//     SHARE of the lease row there).
//   - Ingest is serialised by an application lock (sp_getapplock) held to
//     commit, and a whole batch is one round trip through table-valued
//     parameters.
//   - The lane claim finds the head, then locks the row by id (FOR UPDATE
//     there), so that every writer locks rows before index keys.
//   - Each lane's write is a transaction of its own (no batches of the
//     lanes' writes), whose statements wait at most laneLockWait for a
//     lock: SET LOCK_TIMEOUT in each one's batch, not lock_timeout set in
//     the batch's transaction.
//   - There is no NOTIFY: followers learn of a resignation by polling.
//   - A single node's lock (HoldSingleNode) is an application lock owned by
//     its session (sp_getapplock), not an advisory lock.
//   - Deadlock victims (error 1205) are retried a few times, whole
//     transaction and all.
package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/microsoft/go-mssqldb/msdsn"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/storage"
)

//go:embed sql/*.sql
var sqlFS embed.FS

//go:embed migrations/*.sql
var migrationsFS embed.FS

var queries = storage.MustLoadQueries(sqlFS, "sql")

// The user-defined table types of an ingest batch (migrations/0001_init.sql).
// Unqualified, like the tables: both resolve in the login's default schema.
const (
	ingestMessageType  = "mf_ingest_message"
	ingestDeliveryType = "mf_ingest_delivery"
	// resendDeadType is the rows of queue_resend_dead.sql
	// (migrations/0011_resend_dead_type.sql).
	resendDeadType = "mf_resend_dead"
)

// Error numbers the dialect acts on.
const (
	// errDeadlock is SQL Server's "chosen as the deadlock victim": the
	// server has rolled the transaction back, so running it again is safe.
	errDeadlock = 1205
	// errIngestLockDeadlock is thrown by message_ingest.sql when
	// sp_getapplock reports a deadlock (-3) on the ingest lock.
	errIngestLockDeadlock = 51205
	// errDuplicateKey and errDuplicateIndexKey are a violation of a
	// primary key or unique constraint and of a unique index.
	errDuplicateKey      = 2627
	errDuplicateIndexKey = 2601
)

// Deadlock retries: a victim is retried after a short, growing, jittered
// pause, at most deadlockAttempts times in all.
const (
	deadlockAttempts = 5
	deadlockBackoff  = 20 * time.Millisecond
)

// Options configure Open.
type Options struct {
	// URL is a go-mssqldb connection string: a sqlserver:// URL, an ADO
	// string or an odbc: string. Its TLS settings (encrypt,
	// TrustServerCertificate, certificate, ...) are used as given.
	URL string
	// Password, when set, overrides the URL's (it comes from
	// MF_STORE_PASSWORD, never from the command line).
	Password string
	// PoolSize is the maximum number of open connections (default 5).
	PoolSize int
	// ApplicationName, when set, names the sessions in
	// sys.dm_exec_sessions (program_name), unless the URL sets app name:
	// the error of a second single node names the first by it
	// (HoldSingleNode).
	ApplicationName string
	// Log receives a warning when the URL lets connections to a server on
	// another host go unencrypted, and what the single node's lock does.
	Log zerolog.Logger
}

// Store is the SQL Server storage.Store.
type Store struct {
	db *sql.DB
	// lease is the leader lease's own connection, as on PostgreSQL (a pool
	// of one, opened on first use): a renewal must not wait past the trust
	// window for a connection of db that writes or reads hold.
	lease *sql.DB
	log   zerolog.Logger
	// single holds a single node's lock (HoldSingleNode).
	single singleNode
}

var _ storage.Store = (*Store)(nil)

// plaintextWarning is what Open logs, and mf check prints, of a store url
// that lets connections to another machine go unencrypted.
const plaintextWarning = "the store url lets connections to the database go unencrypted, and they carry every message (PHI): set encrypt=strict (or true) in [store] url"

// unverifiedWarning is what Open logs, and mf check prints, of a store url
// whose connections to another host are encrypted without any check of
// the server's certificate.
const unverifiedWarning = "the store url encrypts connections to the database without verifying its certificate (TrustServerCertificate=true): a machine on the path can pose as the database and read every message (PHI) and the password: remove TrustServerCertificate from [store] url (with certificate=, the CA of the database's certificate, unless the system's roots hold it)"

// CheckURL refuses a store url that Open would refuse, and returns the
// warning Open would log of it (or ""), without connecting: mf check calls
// it, so that a config it passes does not fail at start unannounced.
func CheckURL(url string) (warning string, err error) {
	cfg, err := connectorConfig(Options{URL: url})
	if err != nil {
		return "", err
	}
	if host, why := plaintextRisk(cfg); why != "" {
		return fmt.Sprintf("%s (host %s, encrypt %s)", plaintextWarning, host, why), nil
	}
	if host := unverifiedRisk(cfg); host != "" {
		return fmt.Sprintf("%s (host %s)", unverifiedWarning, host), nil
	}
	return "", nil
}

// Open prepares a connection pool. Like the PostgreSQL dialect it does not
// connect yet, and it does not migrate: call Migrate.
func Open(_ context.Context, o Options) (*Store, error) {
	cfg, err := connectorConfig(o)
	if err != nil {
		return nil, err
	}
	if host, why := plaintextRisk(cfg); why != "" {
		o.Log.Warn().Str("host", host).Str("encrypt", why).Msg(plaintextWarning)
	} else if host := unverifiedRisk(cfg); host != "" {
		o.Log.Warn().Str("host", host).Msg(unverifiedWarning)
	}
	// NewConnectorConfig builds the connector of the same driver that
	// go-mssqldb registers as "sqlserver" (@name parameters, no "?"
	// rewriting), from the parsed settings, so the password can be replaced
	// without re-serialising the URL and losing its TLS settings.
	db := sql.OpenDB(mssql.NewConnectorConfig(cfg))
	size := o.PoolSize
	if size <= 0 {
		size = 5
	}
	db.SetMaxOpenConns(size)
	db.SetMaxIdleConns(size)
	lease := sql.OpenDB(mssql.NewConnectorConfig(cfg))
	lease.SetMaxOpenConns(1)
	lease.SetMaxIdleConns(1)
	s := &Store{db: db, lease: lease, log: o.Log}
	s.single.Dialect, s.single.Log = "sqlserver", o.Log
	// The single node's lock session, opened only by HoldSingleNode. No
	// idle connection is kept: one let go is closed, and its session, with
	// the lock, ends.
	s.single.db = sql.OpenDB(mssql.NewConnectorConfig(cfg))
	s.single.db.SetMaxIdleConns(0)
	return s, nil
}

// DelayedDurability reads the database's DELAYED_DURABILITY setting:
// DISABLED, ALLOWED or FORCED. With FORCED, SQL Server acknowledges every
// commit before its log records are on disk, whatever the transaction
// asks, and a crash of the server loses messages mf has answered AA; no
// session can change that, so mf run says so at start.
func (s *Store) DelayedDurability(ctx context.Context) (string, error) {
	var d string
	if err := s.db.QueryRowContext(ctx, queries.Get("delayed_durability")).Scan(&d); err != nil {
		return "", fmt.Errorf("sqlserver: read the database's DELAYED_DURABILITY: %w", err)
	}
	return d, nil
}

// Dialect implements storage.Store.
func (s *Store) Dialect() string { return "sqlserver" }

// Clusterable implements storage.Store.
func (s *Store) Clusterable() bool { return true }

// ClaimAhead implements storage.Store: 7, as PostgreSQL (a claim is a round
// trip and a batch of statements; not measured here, where there is no SQL
// Server).
func (s *Store) ClaimAhead() int { return 7 }

// Close implements storage.Store.
func (s *Store) Close() error {
	s.single.Close()
	return errors.Join(s.db.Close(), s.lease.Close(), s.single.db.Close())
}

// Ping implements storage.Store.
func (s *Store) Ping(ctx context.Context) error {
	var n int64
	var readOnly bool
	if err := s.db.QueryRowContext(ctx, queries.Get("ping")).Scan(&n, &readOnly); err != nil {
		return fmt.Errorf("sqlserver: ping (is the store migrated?): %w", err)
	}
	if n != 1 {
		return fmt.Errorf("sqlserver: ping: %d leader lease rows, want 1", n)
	}
	if readOnly {
		return fmt.Errorf("sqlserver: ping: %w: point store.url at the primary replica (an availability group listener without ApplicationIntent=ReadOnly), or ALTER DATABASE ... SET READ_WRITE", storage.ErrReadOnly)
	}
	return nil
}

// Migrate implements storage.Store: every pending migration in one
// transaction, under the schema's migration application lock
// (migrate_lock.sql; SQL Server DDL is transactional, so a failed migration
// leaves nothing behind).
//
// Pending migrations on a schema in use wait for the locks of the nodes
// still running (a rolling upgrade), and their writes wait behind the
// migrations: each lock is waited for at most 2 s (migrate_lock_timeout.sql),
// so that a long transaction elsewhere does not stall the primary behind
// the migration, and a lock timeout (1222) or a deadlock (1205) rolls the
// migrations back and tries them again, up to migrateAttempts times, as on
// PostgreSQL.
func (s *Store) Migrate(ctx context.Context) error {
	migrations, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	err = storage.MigrateRetry(ctx, s.log, migrateAttempts, migratePause, "sys.dm_tran_locks for what holds mf's tables",
		lockConflict, func() error { return s.migrateOnce(ctx, migrations) })
	if lockConflict(err) {
		err = fmt.Errorf("%w: the migrations could not take their locks in %d attempts (SQL Server error 1222, lock request time out, or 1205, deadlock): another session holds mf's tables (see sys.dm_tran_locks); run mf migrate again once it ends", err, migrateAttempts)
	}
	return wrap("migrate", err)
}

// migrateAttempts and migratePause bound Migrate's waits for locks of other
// sessions (Migrate); each wait is at most 2 s (migrate_lock_timeout.sql).
const migrateAttempts = 30

var migratePause = time.Second // a variable for tests

// errLockTimeout is SQL Server's "lock request time out period exceeded":
// a wait for a lock outlasted SET LOCK_TIMEOUT.
const errLockTimeout = 1222

// lockConflict reports a lock timeout (1222) or a deadlock (1205): the
// migrations met another session's locks, and the transaction is to be run
// again.
func lockConflict(err error) bool {
	_, ok := errorNumber(err, func(n int32) bool { return n == errLockTimeout || n == errDeadlock })
	return ok
}

// migrateOnce is one attempt of Migrate, in one transaction on a connection
// of its own: SET LOCK_TIMEOUT is the session's, so it is undone on that
// connection before the connection goes back to the pool, or the connection
// is discarded.
func (s *Store) migrateOnce(ctx context.Context, migrations []storage.Migration) (err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	timed := false
	defer func() {
		if !timed {
			return
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second) // a server gone must not hold the start
		_, rerr := conn.ExecContext(rctx, queries.Get("migrate_lock_timeout_reset"))
		rcancel()
		if rerr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // not back to the pool with a 2 s lock timeout
		}
	}()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// After XACT_ABORT or a deadlock the server has already rolled
			// back; the driver then sends nothing.
			_ = tx.Rollback()
		}
	}()
	var lock int
	if err := tx.QueryRowContext(ctx, queries.Get("migrate_lock")).Scan(&lock); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	if lock < 0 {
		return fmt.Errorf("take migration lock: sp_getapplock returned %d", lock)
	}
	if _, err := tx.ExecContext(ctx, queries.Get("migrate_table")); err != nil {
		return fmt.Errorf("check or create mf_schema_migrations: %w", err)
	}
	done, err := storage.AppliedMigrations(ctx, tx, queries.Get("migrate_applied"))
	if err != nil {
		return err
	}
	if err := storage.CheckApplied(migrations, done); err != nil {
		return err
	}
	pending := slices.ContainsFunc(migrations, func(m storage.Migration) bool { return !done[m.Version] })
	if pending && done[1] { // 0001 made the tables: a schema in use
		timed = true
		if _, err := tx.ExecContext(ctx, queries.Get("migrate_lock_timeout")); err != nil {
			return fmt.Errorf("set the migrations' lock timeout: %w", err)
		}
	}
	for _, m := range migrations {
		if done[m.Version] {
			continue
		}
		for i, batch := range batches(m.SQL) {
			if _, err := tx.ExecContext(ctx, batch); err != nil {
				return fmt.Errorf("apply migration %s, batch %d: %w", m.Name, i+1, err)
			}
		}
		if _, err := tx.ExecContext(ctx, queries.Get("migrate_record"),
			sql.Named("version", int32(m.Version)), sql.Named("name", m.Name)); err != nil {
			return fmt.Errorf("record migration %s: %w", m.Name, err)
		}
	}
	return tx.Commit()
}

// SchemaCheck implements storage.Store.
func (s *Store) SchemaCheck(ctx context.Context) error {
	migrations, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	var done map[int]bool
	err = retryDeadlocks(ctx, func() error {
		var err error
		done, err = storage.AppliedMigrations(ctx, s.db, queries.Get("migrate_applied"))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlserver: %w", err)
	}
	return storage.CheckSchema(migrations, done)
}

// batches splits a migration on the lines that are exactly GO (trailing
// blanks and a CR allowed). GO is not T-SQL but the batch separator of sqlcmd
// and SSMS; some statements (CREATE VIEW, CREATE PROCEDURE, ...) must begin a
// batch, and a migration may need a later batch to see an earlier one's
// objects. Blank batches are dropped.
func batches(script string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if strings.TrimSpace(cur.String()) != "" {
			out = append(out, cur.String())
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(script, "\n") {
		if strings.TrimRight(line, " \t\r\n") == "GO" {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return out
}

// inTx runs fn in a READ COMMITTED transaction (READ_COMMITTED_SNAPSHOT may
// be on or off: every statement that decides something takes its own locks)
// and commits it. A deadlock victim is run again from the start.
//
// The transaction is rolled back however fn ends, a panic included (a
// driver bug decoding a reply, a nil dereference in a scan): the lanes call
// the store with the term's context, which nothing cancels after a lane
// actor's panic (protoactor recovers it), so database/sql's rollback on
// cancellation would come only at the end of the term, and until then the
// connection stayed checked out of the pool with every lock the
// transaction took: the fence's shared lock on mf_leader_term (an election
// waits for it), the lane's row locks, the ingest application lock. As
// SQLite's writer does (6a6d003) and pgx.BeginFunc on PostgreSQL.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return retryDeadlocks(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		// After the commit this is sql.ErrTxDone, ignored; after a rollback
		// the server made itself (XACT_ABORT, a deadlock) the driver sends
		// nothing.
		defer func() { _ = tx.Rollback() }()
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// fenced runs fn in a transaction that first checks the fence (fence.sql) and
// holds the term row shared until commit. A mismatch is ErrFenced and the
// transaction is rolled back. A single node's write (the zero fence) is
// refused, before any statement, while the node does not know it holds its
// lock (storage.SingleNode.RefuseUnheld).
func (s *Store) fenced(ctx context.Context, f storage.Fence, fn func(tx *sql.Tx) error) error {
	if err := s.single.RefuseUnheld(f.Owner, f.Term); err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, queries.Get("fence"),
			sql.Named("owner", f.Owner), sql.Named("term", f.Term)).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return storage.ErrFenced
		}
		if err != nil {
			return fmt.Errorf("fence check: %w", err)
		}
		return fn(tx)
	})
}

// laneLockWait is how long a lane's write waits for each lock it needs
// before it fails: SET LOCK_TIMEOUT 500 at the top of each of the lanes'
// statements (queue_claim_next.sql, queue_complete.sql,
// queue_give_back.sql, queue_release_own.sql, queue_retry.sql,
// queue_dead.sql, queue_hold.sql, queue_extend_lease.sql), as PostgreSQL's
// lanes wait at most 500 ms for a row lock (storage/postgres/lanebatch.go).
//
// Why: every lane actor runs its write in its own transaction on the pool
// (5 connections by default). A row lock another session holds (an
// operator's UPDATE of queue rows left open in SSMS, a reporting tool's
// SELECT ... WITH (UPDLOCK)) made each lane whose row it covered wait, a
// connection checked out, for as long as that session lived: five such
// lanes took the whole pool, and every ingest (AE to every sender), every
// API read and /ready waited for a connection, while the lease renewal, on
// a connection of its own, kept the node primary. Now such a write fails
// after 500 ms with SQL Server's error 1222, its transaction rolled back and
// its connection given back, and the lane tries again a second later
// (lanes/lane.go, storeFailed), as on PostgreSQL (SQLSTATE 55P03). Long
// beside a lane's write (milliseconds: the waits it is meant to outlast
// are other short transactions, an ingest's uncommitted rows read by a
// claim with READ_COMMITTED_SNAPSHOT OFF among them), short beside the
// lane's retry, and well inside SQL Server's deadlock monitor interval
// (5 s), so that in a deadlock with another session's long statement the
// lane gives way first.
//
// Where: in each statement's own batch. go-mssqldb sends a statement with
// parameters as a call of sp_executesql, and a SET in the batch of
// sp_executesql holds until that batch ends ("SET Statements
// (Transact-SQL)": the option is restored once control returns from the
// batch of the dynamic SQL string), so the setting never stays on a
// pooled connection, and the fence (fence.sql, a batch of its own, which
// an election holds up briefly) still waits as long as it must, as on
// PostgreSQL, where the lock_timeout is set after the fence. Every lane
// statement has parameters (TestLaneWritesBoundTheirLockWaits): one sent
// without would be a plain batch, whose SET would stay on the session. And
// with XACT_ABORT ON: a lock timeout otherwise cancels only the statement
// that waited, leaves the transaction open and runs the rest of the batch
// (the SELECT @@ROWCOUNT that follows an UPDATE would say 0 rows: a claim
// lost, not a lock).
//
// What it does not do: PostgreSQL's lanes share one batch of writes, and
// sets a lane whose write ran out aside into a batcher of its own, one
// connection for all such lanes. Here each blocked lane still takes a
// connection for 500 ms out of every 1.5 s or so, so with many more blocked
// lanes than connections an ingest still waits for a connection, no longer
// without end (database/sql hands a connection given back to a waiting
// caller).
const laneLockWait = 500 * time.Millisecond

// laneWrite runs fn as fenced does, for a lane's write (whose statements
// wait at most laneLockWait for a lock), and says so when a lock wait ran
// out: an error like any other store error to the lane, which tries again
// after its pause, not a fence nor a refusal of the row.
func (s *Store) laneWrite(ctx context.Context, f storage.Fence, fn func(tx *sql.Tx) error) error {
	err := s.fenced(ctx, f, fn)
	if lockTimedOut(err) {
		err = fmt.Errorf("%w; it waited %s for a lock that another session holds (an open transaction that updated or locked a queue row: find it by blocking_session_id in sys.dm_exec_requests); its lane tries again", err, laneLockWait)
	}
	return err
}

// lockTimedOut reports SQL Server's error 1222: a wait for a lock outlasted
// the batch's SET LOCK_TIMEOUT.
func lockTimedOut(err error) bool {
	_, ok := errorNumber(err, func(n int32) bool { return n == errLockTimeout })
	return ok
}

// retryDeadlocks runs fn again while it fails as a deadlock victim, at most
// deadlockAttempts times. SQL Server picks a victim among transactions that
// wait for each other and rolls it back whole, so a retry starts clean.
func retryDeadlocks(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !isDeadlock(err) {
			return err
		}
		if attempt == deadlockAttempts {
			return fmt.Errorf("deadlock victim %d times in a row: %w", attempt, err)
		}
		pause := time.NewTimer(deadlockBackoff*time.Duration(attempt) + rand.N(deadlockBackoff))
		select {
		case <-ctx.Done():
			pause.Stop()
			return err
		case <-pause.C:
		}
	}
}

func isDeadlock(err error) bool {
	_, ok := errorNumber(err, func(n int32) bool { return n == errDeadlock || n == errIngestLockDeadlock })
	return ok
}

// errorNumber returns the first of err's SQL Server error numbers, the
// error's own and then those of every message of its batch (mssql.Error.All),
// that match accepts.
func errorNumber(err error, match func(int32) bool) (int32, bool) {
	var e mssql.Error
	if !errors.As(err, &e) {
		return 0, false
	}
	for _, one := range append([]mssql.Error{e}, e.All...) {
		if match(one.Number) {
			return one.Number, true
		}
	}
	return 0, false
}

// span passes d to the SQL files as two INT parameters, whole seconds
// (@name_s) and the remaining microseconds (@name_us), which they add with
// DATEADD to the database clock. DATEADD takes an INT: a single count of
// microseconds would overflow past 35 minutes, of milliseconds past 24 days.
// Durations beyond ±68 years are clamped; config refuses such times with
// this store (config.MaxSQLServerSeconds), since a clamped lease TTL could
// fall below the fence timeout.
func span(name string, d time.Duration) []any {
	secs := storage.Seconds(d)
	whole := math.Trunc(secs)
	micros := math.Round((secs - whole) * 1e6)
	if math.Abs(micros) >= 1e6 { // rounding carried into the next second
		whole += math.Copysign(1, micros)
		micros = 0
	}
	whole = math.Max(-math.MaxInt32, math.Min(math.MaxInt32, whole))
	return []any{sql.Named(name+"_s", int32(whole)), sql.Named(name+"_us", int32(micros))}
}

// utc returns t in UTC (DATETIME2 values come back as UTC wall clocks).
func utc(t time.Time) time.Time { return t.UTC() }

type leaseScan struct {
	l storage.Lease
}

func (x *leaseScan) dest() []any {
	return []any{&x.l.Owner, &x.l.Term, &x.l.AcquiredAt, &x.l.ExpiresAt, &x.l.DBNow}
}

func (x *leaseScan) lease() storage.Lease {
	l := x.l
	l.AcquiredAt, l.ExpiresAt, l.DBNow = utc(l.AcquiredAt), utc(l.ExpiresAt), utc(l.DBNow)
	return l
}

// LeaseAttemptElect implements storage.Store. The statement runs in a
// transaction of its own, which owns the single-node lock it takes shared
// (lease_attempt_elect.sql) until the election commits: it elects nobody
// while a single node holds that lock (storage.ErrSingleNodeRunning, with
// the lease as it stands).
func (s *Store) LeaseAttemptElect(ctx context.Context, p storage.LeaseAttemptElectParams) (storage.Lease, bool, error) {
	var (
		x       leaseScan
		elected bool
		single  int // sp_getapplock's return code: < 0 not granted
	)
	args := append([]any{sql.Named("owner", p.Owner)}, span("ttl", p.TTL)...)
	err := retryDeadlocks(ctx, func() error {
		tx, err := s.lease.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, queries.Get("lease_attempt_elect"), args...).Scan(append(x.dest(), &elected, &single)...); err != nil {
			// After XACT_ABORT or a deadlock the server has already rolled
			// back; the driver then sends nothing.
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = storage.ErrNotFound // no lease row: not migrated
	}
	if err != nil {
		return storage.Lease{}, false, fmt.Errorf("sqlserver: lease elect for %s: %w", p.Owner, err)
	}
	switch {
	case single == -1:
		return x.lease(), false, fmt.Errorf("sqlserver: lease elect for %s: %w (it holds this schema's single-node lock): stop it, or enable [cluster] on it", p.Owner, storage.ErrSingleNodeRunning)
	case single < 0:
		return storage.Lease{}, false, fmt.Errorf("sqlserver: lease elect for %s: the single-node lock, taken shared, was not granted: sp_getapplock returned %d; nothing was elected", p.Owner, single)
	}
	return x.lease(), elected, nil
}

// LeaseAttemptRenew implements storage.Store.
func (s *Store) LeaseAttemptRenew(ctx context.Context, p storage.LeaseAttemptRenewParams) (storage.Lease, error) {
	var x leaseScan
	args := append([]any{sql.Named("owner", p.Owner), sql.Named("term", p.Term)}, span("ttl", p.TTL)...)
	err := retryDeadlocks(ctx, func() error {
		return s.lease.QueryRowContext(ctx, queries.Get("lease_attempt_renew"), args...).Scan(x.dest()...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return storage.Lease{}, storage.ErrLeaseLost
	}
	if err != nil {
		return storage.Lease{}, fmt.Errorf("sqlserver: lease renew for term %d: %w", p.Term, err)
	}
	return x.lease(), nil
}

// LeaseResign implements storage.Store. SQL Server has no NOTIFY: followers
// find the resigned lease at their next election attempt.
func (s *Store) LeaseResign(ctx context.Context, p storage.LeaseResignParams) (bool, error) {
	var n int64
	err := retryDeadlocks(ctx, func() error {
		return s.lease.QueryRowContext(ctx, queries.Get("lease_resign"),
			sql.Named("owner", p.Owner), sql.Named("term", p.Term)).Scan(&n)
	})
	if err != nil {
		return false, fmt.Errorf("sqlserver: lease resign for term %d: %w", p.Term, err)
	}
	return n > 0, nil
}

// LeaseRead implements storage.Store.
func (s *Store) LeaseRead(ctx context.Context) (storage.Lease, error) {
	var x leaseScan
	err := retryDeadlocks(ctx, func() error {
		return s.db.QueryRowContext(ctx, queries.Get("lease_read")).Scan(x.dest()...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = storage.ErrNotFound
	}
	if err != nil {
		return storage.Lease{}, fmt.Errorf("sqlserver: lease read: %w", err)
	}
	return x.lease(), nil
}

// NodeHeartbeat implements storage.Store.
func (s *Store) NodeHeartbeat(ctx context.Context, p storage.NodeHeartbeatParams) error {
	err := retryDeadlocks(ctx, func() error {
		_, err := s.db.ExecContext(ctx, queries.Get("node_heartbeat"),
			sql.Named("node_id", p.NodeID),
			sql.Named("host", mssql.NVarCharMax(p.Host)),
			sql.Named("pid", p.PID),
			sql.Named("is_leader", p.IsLeader),
			sql.Named("config_version", p.ConfigVersion),
			sql.Named("config_fingerprint", p.ConfigFingerprint),
			sql.Named("config_failed_version", p.ConfigFailedVersion),
			sql.Named("config_error", mssql.NVarCharMax(p.ConfigError)),
			sql.Named("started", p.Started))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlserver: node heartbeat for %s: %w", p.NodeID, err)
	}
	return nil
}

// NodeLeave implements storage.Store.
func (s *Store) NodeLeave(ctx context.Context, p storage.NodeLeaveParams) error {
	var n int64
	err := retryDeadlocks(ctx, func() error {
		return s.db.QueryRowContext(ctx, queries.Get("node_leave"), sql.Named("node_id", p.NodeID)).Scan(&n)
	})
	if err != nil {
		return fmt.Errorf("sqlserver: node leave for %s: %w", p.NodeID, err)
	}
	if n == 0 {
		return storage.ErrNotFound
	}
	return nil
}

// NodeList implements storage.Store.
func (s *Store) NodeList(ctx context.Context) (storage.NodeList, error) {
	var out storage.NodeList
	err := retryDeadlocks(ctx, func() error {
		out = storage.NodeList{}
		rows, err := s.db.QueryContext(ctx, queries.Get("node_list"))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id, host, status, fp, cfgError sql.NullString
				pid, cfgVersion, cfgFailed     sql.NullInt64
				startedAt, lastSeen            sql.NullTime
				isLeader                       sql.NullBool
			)
			if err := rows.Scan(&out.DBNow, &id, &host, &pid, &status, &startedAt, &lastSeen, &isLeader, &cfgVersion, &fp, &cfgFailed, &cfgError); err != nil {
				return err
			}
			if !id.Valid { // the clock row of an empty table
				continue
			}
			out.Nodes = append(out.Nodes, storage.Node{
				NodeID: id.String, Host: host.String, PID: pid.Int64, Status: status.String,
				StartedAt: utc(startedAt.Time), LastSeen: utc(lastSeen.Time), IsLeader: isLeader.Bool,
				ConfigVersion: cfgVersion.Int64, ConfigFingerprint: fp.String,
				ConfigFailedVersion: cfgFailed.Int64, ConfigError: cfgError.String,
			})
		}
		return rows.Err()
	})
	if err != nil {
		return storage.NodeList{}, fmt.Errorf("sqlserver: node list: %w", err)
	}
	out.DBNow = utc(out.DBNow)
	return out, nil
}

// ingestMessageRow and ingestDeliveryRow are the rows of the table-valued
// parameters of message_ingest.sql. The driver maps fields to the table
// type's columns by position: keep them in the order of the CREATE TYPEs in
// migrations/0001_init.sql.
type ingestMessageRow struct {
	Ord         int32
	Inbound     string
	ControlID   string
	MessageType string
	Payload     []byte
	Status      string
	Error       string
}

type ingestDeliveryRow struct {
	MessageOrd  int32
	Ord         int32
	Destination string
	Lane        string
}

// MessageIngest implements storage.Store. The whole batch is one statement
// batch (message_ingest.sql): both tables' rows travel as table-valued
// parameters, the ingest lock is taken after the fence, and the generated ids
// come back in batch order.
func (s *Store) MessageIngest(ctx context.Context, p storage.MessageIngestParams) ([]storage.IngestedMessage, error) {
	msgs := make([]ingestMessageRow, len(p.Messages))
	dels := make([]ingestDeliveryRow, 0, len(p.Messages))
	for i, m := range p.Messages {
		payload := m.Payload
		if payload == nil {
			payload = []byte{} // a nil slice would be sent as NULL
		}
		msgs[i] = ingestMessageRow{
			Ord: int32(i + 1), Inbound: m.Inbound, ControlID: m.ControlID, MessageType: m.MessageType,
			Payload: payload, Status: m.Status, Error: m.Error,
		}
		for j, d := range m.Deliveries {
			dels = append(dels, ingestDeliveryRow{MessageOrd: int32(i + 1), Ord: int32(j + 1), Destination: d.Destination, Lane: d.Lane})
		}
	}
	var out []storage.IngestedMessage
	err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
		out = make([]storage.IngestedMessage, len(p.Messages))
		if len(p.Messages) == 0 {
			return nil // fenced, and nothing to insert
		}
		msgIDs, queueIDs, err := ingestBatch(ctx, tx, msgs, dels)
		if err != nil {
			return err
		}
		if len(msgIDs) != len(msgs) || len(queueIDs) != len(dels) {
			return fmt.Errorf("got %d message and %d queue ids for %d messages and %d deliveries",
				len(msgIDs), len(queueIDs), len(msgs), len(dels))
		}
		for i, m := range p.Messages {
			out[i] = storage.IngestedMessage{MessageID: msgIDs[i], QueueIDs: queueIDs[:len(m.Deliveries):len(m.Deliveries)]}
			queueIDs = queueIDs[len(m.Deliveries):]
		}
		return nil
	})
	if err != nil {
		if r := refusal(err); r != nil {
			err = r // not the driver's message: a truncation error quotes the value
		}
		return nil, wrap(fmt.Sprintf("message ingest of %d messages", len(p.Messages)), err)
	}
	return out, nil
}

func ingestBatch(ctx context.Context, tx *sql.Tx, msgs []ingestMessageRow, dels []ingestDeliveryRow) (msgIDs, queueIDs []int64, err error) {
	rows, err := tx.QueryContext(ctx, queries.Get("message_ingest"),
		sql.Named("messages", mssql.TVP{TypeName: ingestMessageType, Value: msgs}),
		sql.Named("deliveries", mssql.TVP{TypeName: ingestDeliveryType, Value: dels}))
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	queueIDs = []int64{}
	for rows.Next() {
		var (
			kind int32
			id   int64
		)
		if err := rows.Scan(&kind, &id); err != nil {
			return nil, nil, err
		}
		if kind == 0 {
			msgIDs = append(msgIDs, id)
		} else {
			queueIDs = append(queueIDs, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return msgIDs, queueIDs, rows.Close()
}

// queueRowScan scans the columns of a queue row in the order of
// queue_by_message.sql (but its last two, last_error_detail and resent_as,
// which only the readers that show them select).
type queueRowScan struct {
	r     storage.QueueRow
	lease sql.NullTime
}

func (x *queueRowScan) dest() []any {
	r := &x.r
	return []any{&r.ID, &r.MessageID, &r.Destination, &r.Lane, &r.Status, &r.Attempts, &r.NextAttemptAt,
		&r.LeaseOwner, &x.lease, &r.LastError, &r.CreatedAt, &r.UpdatedAt, &r.Held}
}

func (x *queueRowScan) row() storage.QueueRow {
	r := x.r
	r.NextAttemptAt, r.CreatedAt, r.UpdatedAt = utc(r.NextAttemptAt), utc(r.CreatedAt), utc(r.UpdatedAt)
	r.LeaseExpiresAt = nil
	if x.lease.Valid {
		t := utc(x.lease.Time)
		r.LeaseExpiresAt = &t
	}
	return r
}

// MessageRead implements storage.Store.
func (s *Store) MessageRead(ctx context.Context, id int64) (storage.MessageDetail, error) {
	var d storage.MessageDetail
	err := retryDeadlocks(ctx, func() error {
		// Two statements, each its own snapshot: the queue rows first, so
		// that a purge committed between the two (it deletes a message
		// with its last rows, in one transaction) leaves the message not
		// found, not stored with no rows (PostgreSQL reads both in one
		// REPEATABLE READ transaction).
		d = storage.MessageDetail{}
		rows, err := s.db.QueryContext(ctx, queries.Get("queue_by_message"), sql.Named("message_id", id))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var x queueRowScan
			if err := rows.Scan(append(x.dest(), &x.r.LastErrorDetail, &x.r.ResentAs)...); err != nil {
				return err
			}
			d.Queue = append(d.Queue, x.row())
		}
		if err := rows.Err(); err != nil {
			return err
		}
		m := &d.Message
		err = s.db.QueryRowContext(ctx, queries.Get("message_read"), sql.Named("id", id)).Scan(
			&m.ID, &m.Inbound, &m.ReceivedAt, &m.ControlID, &m.MessageType, &m.Payload, &m.Status, &m.Error)
		m.ReceivedAt = utc(m.ReceivedAt)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return storage.MessageDetail{}, storage.ErrNotFound
	}
	if err != nil {
		return storage.MessageDetail{}, fmt.Errorf("sqlserver: message read %d: %w", id, err)
	}
	return d, nil
}

// MessageSearch implements storage.Store: one statement batch
// (message_search.sql).
func (s *Store) MessageSearch(ctx context.Context, p storage.MessageSearchParams) ([]storage.MessageSummary, error) {
	if err := p.CheckSearch(); err != nil {
		return nil, err
	}
	var out []storage.MessageSummary
	err := retryDeadlocks(ctx, func() error {
		out = nil
		rows, err := s.db.QueryContext(ctx, queries.Get("message_search"),
			sql.Named("since", isoMicros(p.Since)), sql.Named("until", isoMicros(p.SearchUntil())),
			sql.Named("control_id", p.ControlID), sql.Named("inbound", p.Inbound), sql.Named("status", p.Status),
			sql.Named("before", p.SearchBefore()), sql.Named("limit", int64(p.Limit)))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				m              storage.Message
				qID            *int64
				qDest, qStatus *string
			)
			if err := rows.Scan(&m.ID, &m.Inbound, &m.ReceivedAt, &m.ControlID, &m.MessageType, &m.Status, &m.Error, &qID, &qDest, &qStatus); err != nil {
				return err
			}
			m.ReceivedAt = utc(m.ReceivedAt)
			out = storage.AppendSummary(out, m, qID, qDest, qStatus)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, wrap("message search", err)
	}
	return out, nil
}

// isoMicros is t as message_search.sql converts it to a DATETIME2(6) (style
// 126): UTC, to the microsecond, rounded up, as received_at is kept to the
// microsecond (received_at >= t holds exactly when it holds of the rounded
// value).
func isoMicros(t time.Time) string {
	r := t.Truncate(time.Microsecond)
	if r.Before(t) {
		r = r.Add(time.Microsecond)
	}
	return r.UTC().Format("2006-01-02T15:04:05.000000")
}

// MessageResend implements storage.Store: the message's finished rows and
// its row locked, then the ingest lock, the new rows and the marks
// (message_resend.sql), and the queue's version, in one transaction. Not
// fenced: an operator acts through any node's API.
func (s *Store) MessageResend(ctx context.Context, p storage.MessageResendParams) ([]int64, error) {
	dels := make([]ingestDeliveryRow, len(p.Deliveries))
	for i, d := range p.Deliveries {
		dels[i] = ingestDeliveryRow{MessageOrd: 1, Ord: int32(i + 1), Destination: d.Destination, Lane: d.Lane}
	}
	var ids []int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		ids = nil
		rows, err := tx.QueryContext(ctx, queries.Get("message_resend"), sql.Named("message_id", p.MessageID),
			sql.Named("deliveries", mssql.TVP{TypeName: ingestDeliveryType, Value: dels}))
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil { // not a message gone: a read cut short
			rows.Close()
			return err
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if len(ids) == 0 {
			return storage.ErrNotFound // no such message, or its rows are purged
		}
		if len(ids) != len(dels) {
			return fmt.Errorf("%d queue rows stored for %d deliveries", len(ids), len(dels))
		}
		_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
		return err
	})
	if errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	if _, gone := errorNumber(err, func(n int32) bool { return n == 547 }); gone {
		// The foreign key: the purge deleted the message as the rows went in.
		return nil, storage.ErrNotFound
	}
	if err != nil {
		if r := refusal(err); r != nil {
			err = r // not the driver's message: a truncation error quotes the value
		}
		return nil, wrap(fmt.Sprintf("message resend of %d", p.MessageID), err)
	}
	return ids, nil
}

// resendDeadRow is a row of queue_resend_dead.sql's table-valued
// parameter, in the order of the CREATE TYPE in
// migrations/0011_resend_dead_type.sql.
type resendDeadRow struct {
	Ord       int32
	ID        int64
	MessageID int64
	Lane      string
}

// QueueResendDead implements storage.Store (storage.ResendDead): each
// transaction locks at most storage.ResendDeadChunk dead rows
// (queue_resend_dead_pick.sql), gives each the lane of the routes in force
// (p.Lane), then takes the ingest lock and resends them
// (queue_resend_dead.sql), and bumps the queue's version. The ingest lock
// is not held while the rows' locks are waited for, nor across the round
// trip of their payloads and lanes: every ingest waits while it is. Not
// fenced: an operator acts through any node's API.
func (s *Store) QueueResendDead(ctx context.Context, p storage.QueueResendDeadParams) (storage.ResentDead, error) {
	if p.Lane == nil {
		return storage.ResentDead{}, storage.ErrNoResendLane
	}
	bound := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return isoMicros(t)
	}
	res, err := storage.ResendDead(p.Limit, func(after, before int64, n int) (c storage.ResendChunk, err error) {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			c = storage.ResendChunk{}
			dead, err := storage.DeadRows(ctx, tx, queries.Get("queue_resend_dead_pick"), sql.Named("destination", p.Destination),
				sql.Named("after", after), sql.Named("before", before),
				sql.Named("since", bound(p.Since)), sql.Named("until", bound(p.Until)), sql.Named("limit", int64(n)))
			if err != nil {
				return err
			}
			var resend []storage.DeadRow
			resend, c = p.Relane(dead)
			if len(resend) == 0 {
				return nil
			}
			tvp := make([]resendDeadRow, len(resend))
			for i, d := range resend {
				tvp[i] = resendDeadRow{Ord: int32(i + 1), ID: d.ID, MessageID: d.MessageID, Lane: d.Lane}
			}
			rows, err := tx.QueryContext(ctx, queries.Get("queue_resend_dead"), sql.Named("destination", p.Destination),
				sql.Named("dead", mssql.TVP{TypeName: resendDeadType, Value: tvp}))
			if err != nil {
				return err
			}
			for rows.Next() {
				var o, w int64
				if err := rows.Scan(&o, &w); err != nil {
					rows.Close()
					return err
				}
				c.Old, c.New = append(c.Old, o), append(c.New, w)
			}
			if err := rows.Close(); err != nil {
				return err
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if len(c.Old) != len(resend) {
				return fmt.Errorf("%d queue rows stored for %d dead rows", len(c.Old), len(resend))
			}
			_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
			return err
		})
		if err != nil {
			return storage.ResendChunk{}, err
		}
		return c, nil
	})
	if err != nil {
		if r := refusal(err); r != nil {
			err = r // not the driver's message: a truncation error quotes the value
		}
		return res, wrap(fmt.Sprintf("resend of %s's dead rows", p.Destination), err)
	}
	return res, nil
}

// MessagePurge implements storage.Store: at most p.Limit rows of each
// table, in transactions of at most storage.PurgeChunk rows each
// (storage.Purge), in statements of at most 500 (see
// message_purge_queue.sql). The sweeper's 10,000 rows in one transaction
// held their locks, and the fence's shared lock, which an election waits
// for (and before migration 0012 the leader's renewal too), for the whole
// call.
//
// Each transaction deletes the messages of the queue rows it deleted, found
// by id. Once the finished rows are all gone, the messages that never had
// one are found by a walk that goes on from where the last one stopped
// (message_purge_walk.sql): the walk from the oldest message past the
// cut-off went over every message whose rows were not all finished (a
// destination blocked for weeks: all its backlog) at every call.
func (s *Store) MessagePurge(ctx context.Context, p storage.MessagePurgeParams) (storage.PurgeResult, error) {
	res, err := storage.Purge(p.Limit, func(q int64, first bool) (storage.PurgeResult, error) {
		var r storage.PurgeResult
		err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
			r = storage.PurgeResult{}
			args := append([]any{sql.Named("limit", q)}, span("older", p.OlderThan)...)
			if err := tx.QueryRowContext(ctx, queries.Get("message_purge_queue"), args...).Scan(&r.QueueRows, &r.Messages); err != nil {
				return fmt.Errorf("purge queue rows: %w", err)
			}
			if !first {
				return nil
			}
			if err := tx.QueryRowContext(ctx, queries.Get("node_purge"), span("older", p.OlderThan)...).Scan(&r.Nodes); err != nil {
				return fmt.Errorf("purge nodes: %w", err)
			}
			return nil
		})
		return r, err
	}, func(w int64) (deleted, passed int64, err error) {
		err = s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
			args := append([]any{sql.Named("limit", w)}, span("older", p.OlderThan)...)
			if err := tx.QueryRowContext(ctx, queries.Get("message_purge_walk"), args...).Scan(&deleted, &passed); err != nil {
				return fmt.Errorf("walk of the messages never queued: %w", err)
			}
			return nil
		})
		return deleted, passed, err
	})
	if err != nil {
		return storage.PurgeResult{}, wrap("message purge", err)
	}
	return res, nil
}

// QueueClaimNext implements storage.Store: fence, then find and lock the lane
// head, reclaim it if stranded, claim it if pending and due; see
// queue_claim_next.sql.
func (s *Store) QueueClaimNext(ctx context.Context, p storage.QueueClaimNextParams) (storage.QueueClaim, error) {
	var c *storage.QueueClaim
	err := s.laneWrite(ctx, p.Fence, func(tx *sql.Tx) error {
		run, err := claimRun(ctx, tx, p.Lane, p.From, p.Owner, p.LeaseTTL, 0)
		if err == nil && len(run) == 0 {
			err = storage.ErrNoWork
		}
		if len(run) > 0 {
			c = &run[0]
		}
		return err
	})
	if errors.Is(err, storage.ErrNoWork) {
		return storage.QueueClaim{}, err
	}
	if err != nil {
		return storage.QueueClaim{}, wrap(fmt.Sprintf("queue claim from row %d", p.From), err)
	}
	return *c, nil
}

// QueueAdvance implements storage.Store: the completion and the claim in
// one fenced transaction.
func (s *Store) QueueAdvance(ctx context.Context, p storage.QueueAdvanceParams) (storage.QueueAdvanced, error) {
	var out storage.QueueAdvanced
	err := s.laneWrite(ctx, p.Fence, func(tx *sql.Tx) error {
		out = storage.QueueAdvanced{} // a deadlock victim's retry starts afresh
		n, err := updateClaim(ctx, tx, "queue_complete", p.Claim)
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		out.Completed = n == 1
		run, err := claimRun(ctx, tx, p.Lane, p.Claim.ID, p.Owner, p.LeaseTTL, p.Ahead)
		if len(run) > 0 {
			out.Next, out.Ahead = &run[0], run[1:]
		}
		return err
	})
	if err != nil {
		return storage.QueueAdvanced{}, wrap(fmt.Sprintf("queue advance of row %d attempt %d", p.Claim.ID, p.Claim.Attempt), err)
	}
	return out, nil
}

// QueueGiveBack implements storage.Store.
func (s *Store) QueueGiveBack(ctx context.Context, p storage.QueueGiveBackParams) (int64, error) {
	if len(p.Claims) == 0 {
		return 0, nil
	}
	var total int64
	err := s.laneWrite(ctx, p.Fence, func(tx *sql.Tx) error {
		total = 0 // a deadlock victim's retry starts afresh
		for i, c := range p.Claims {
			e, d := p.Noted(i)
			n, err := updateClaim(ctx, tx, "queue_give_back", c, sql.Named("error", mssql.NVarCharMax(e)), sql.Named("detail", mssql.NVarCharMax(d)))
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	if err != nil {
		return 0, wrap(fmt.Sprintf("queue give back of %d rows", len(p.Claims)), err)
	}
	return total, nil
}

// QueueReleaseOwn implements storage.Store.
func (s *Store) QueueReleaseOwn(ctx context.Context, p storage.QueueReleaseOwnParams) (int64, error) {
	var n int64
	err := s.laneWrite(ctx, p.Fence, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, queries.Get("queue_release_own"), sql.Named("lane", p.Lane), sql.Named("owner", p.Owner)).Scan(&n)
	})
	if err != nil {
		return 0, wrap("queue release own", err) // not the lane: its key is often a patient id
	}
	return n, nil
}

// claimRun runs the lane claim (queue_claim_next.sql) in tx: the claimed
// head and up to ahead rows right behind it, in id order, or none when the
// lane has nothing claimable.
func claimRun(ctx context.Context, tx *sql.Tx, lane string, from int64, owner string, ttl time.Duration, ahead int) ([]storage.QueueClaim, error) {
	args := append([]any{sql.Named("lane", lane), sql.Named("from", from), sql.Named("owner", owner), sql.Named("max", 1+ahead)}, span("ttl", ttl)...)
	rows, err := tx.QueryContext(ctx, queries.Get("queue_claim_next"), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var run []storage.QueueClaim
	for rows.Next() {
		var (
			x queueRowScan
			c storage.QueueClaim
		)
		if err := rows.Scan(append(x.dest(), &c.Payload, &c.ControlID, &c.AttemptsAtRetry)...); err != nil {
			return nil, err
		}
		c.Row = x.row()
		run = append(run, c)
	}
	return run, rows.Err()
}

// claimUpdate runs one of the statements that act on a current claim (each
// returns how many rows it changed) and tells ErrNotFound from ErrClaimLost
// when it changed nothing.
func (s *Store) claimUpdate(ctx context.Context, op string, f storage.Fence, c storage.Claim, args ...any) error {
	err := s.laneWrite(ctx, f, func(tx *sql.Tx) error {
		n, err := updateClaim(ctx, tx, op, c, args...)
		if err != nil || n == 1 {
			return err
		}
		return refusals.MissingOr(ctx, tx, c.ID, storage.ErrClaimLost)
	})
	return wrap(fmt.Sprintf("%s of queue row %d attempt %d", op, c.ID, c.Attempt), err)
}

// updateClaim runs op on the row of claim c in tx and returns the rows it
// changed (each such statement selects its count): 1, or 0 when the claim
// is no longer current.
func updateClaim(ctx context.Context, tx *sql.Tx, op string, c storage.Claim, args ...any) (int64, error) {
	all := append([]any{sql.Named("id", c.ID), sql.Named("owner", c.Owner), sql.Named("attempt", c.Attempt)}, args...)
	var n int64
	err := tx.QueryRowContext(ctx, queries.Get(op), all...).Scan(&n)
	return n, err
}

// QueueComplete implements storage.Store.
func (s *Store) QueueComplete(ctx context.Context, p storage.QueueCompleteParams) error {
	return s.claimUpdate(ctx, "queue_complete", p.Fence, p.Claim)
}

// QueueRetry implements storage.Store.
func (s *Store) QueueRetry(ctx context.Context, p storage.QueueRetryParams) error {
	args := append(span("delay", p.Delay), sql.Named("error", mssql.NVarCharMax(p.Error)), sql.Named("detail", mssql.NVarCharMax(p.Detail)))
	return s.claimUpdate(ctx, "queue_retry", p.Fence, p.Claim, args...)
}

// QueueDead implements storage.Store.
func (s *Store) QueueDead(ctx context.Context, p storage.QueueDeadParams) error {
	return s.claimUpdate(ctx, "queue_dead", p.Fence, p.Claim,
		sql.Named("error", mssql.NVarCharMax(p.Error)), sql.Named("detail", mssql.NVarCharMax(p.Detail)))
}

// QueueHold implements storage.Store.
func (s *Store) QueueHold(ctx context.Context, p storage.QueueHoldParams) error {
	return s.claimUpdate(ctx, "queue_hold", p.Fence, p.Claim,
		sql.Named("error", mssql.NVarCharMax(p.Error)), sql.Named("detail", mssql.NVarCharMax(p.Detail)))
}

// QueueRelease implements storage.Store.
func (s *Store) QueueRelease(ctx context.Context, p storage.QueueReleaseParams) (storage.QueueActed, error) {
	return s.operatorUpdate(ctx, "queue_release", refusals.NotPending, p.ID)
}

// QueueSkip implements storage.Store.
func (s *Store) QueueSkip(ctx context.Context, p storage.QueueSkipParams) (storage.QueueActed, error) {
	return s.operatorUpdate(ctx, "queue_skip", refusals.NotSkipped, p.ID, sql.Named("reason", mssql.NVarCharMax(p.Reason)))
}

// operatorUpdate runs an operator action on a row (the statement returns how
// many rows it changed, and the row's message and destination) and, when it
// changed nothing, returns why as refused tells it (refusals.NotPending,
// refusals.NotSkipped).
func (s *Store) operatorUpdate(ctx context.Context, op string, refused func(context.Context, storage.SQLRowQuerier, int64) error, id int64, args ...any) (storage.QueueActed, error) {
	all := append([]any{sql.Named("id", id)}, args...)
	var acted storage.QueueActed
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var (
			n    int64
			msg  sql.NullInt64
			dest sql.NullString
		)
		if err := tx.QueryRowContext(ctx, queries.Get(op), all...).Scan(&n, &msg, &dest); err != nil {
			return err
		}
		if n == 1 {
			acted = storage.QueueActed{MessageID: msg.Int64, Destination: dest.String}
			_, err := bumpVersion(ctx, tx, storage.QueueVersionName)
			return err
		}
		return refused(ctx, tx, id)
	})
	if err != nil {
		return storage.QueueActed{}, wrap(fmt.Sprintf("%s of queue row %d", op, id), err)
	}
	return acted, nil
}

// QueueExtendLease implements storage.Store.
func (s *Store) QueueExtendLease(ctx context.Context, p storage.QueueExtendLeaseParams) error {
	return s.claimUpdate(ctx, "queue_extend_lease", p.Fence, p.Claim, span("ttl", p.TTL)...)
}

// QueueRecoverForeign implements storage.Store.
func (s *Store) QueueRecoverForeign(ctx context.Context, p storage.QueueRecoverForeignParams) (int64, error) {
	return s.repend(ctx, "queue_recover_foreign", p.Fence, sql.Named("owner", p.Owner))
}

// QueueReclaimExpired implements storage.Store.
func (s *Store) QueueReclaimExpired(ctx context.Context, p storage.QueueReclaimExpiredParams) (int64, error) {
	return s.repend(ctx, "queue_reclaim_expired", p.Fence)
}

// repend runs one fenced statement that re-pends rows and returns how many
// it changed; if any, it bumps the queue's version in the same transaction
// (storage.QueueVersionName).
func (s *Store) repend(ctx context.Context, op string, f storage.Fence, args ...any) (int64, error) {
	var n int64
	err := s.fenced(ctx, f, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, queries.Get(op), args...).Scan(&n); err != nil || n == 0 {
			return err
		}
		_, err := bumpVersion(ctx, tx, storage.QueueVersionName)
		return err
	})
	if err != nil {
		return 0, wrap(strings.ReplaceAll(op, "_", " "), err)
	}
	return n, nil
}

// bumpVersion increments the version named name and returns it, on its own
// or inside a transaction: the queue's version (storage.QueueVersionName)
// moves in the transaction of the change it tells of.
func bumpVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, name string) (int64, error) {
	var v int64
	err := q.QueryRowContext(ctx, queries.Get("config_version_bump"), sql.Named("name", name)).Scan(&v)
	return v, err
}

// QueueLanes implements storage.Store.
func (s *Store) QueueLanes(ctx context.Context, p storage.QueueLanesParams) ([]storage.LaneSummary, error) {
	if p.Limit <= 0 {
		return storage.AllLanes(ctx, s.QueueLanes)
	}
	var out []storage.LaneSummary
	err := retryDeadlocks(ctx, func() error {
		out = nil
		rows, err := s.db.QueryContext(ctx, queries.Get("queue_lanes"), sql.Named("after", p.After), sql.Named("limit", p.Limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				l     storage.LaneSummary
				x     queueRowScan
				ageUS int64
			)
			dest := append([]any{&l.Lane, &l.Destination, &l.Depth}, x.dest()...)
			if err := rows.Scan(append(dest, &ageUS, &l.Claimable, &x.r.LastErrorDetail)...); err != nil {
				return err
			}
			l.Head = x.row()
			l.HeadAge = time.Duration(ageUS) * time.Microsecond
			out = append(out, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlserver: queue lanes: %w", err)
	}
	return out, nil
}

// QueueStats implements storage.Store.
func (s *Store) QueueStats(ctx context.Context) ([]storage.QueueStat, error) {
	var out []storage.QueueStat
	err := retryDeadlocks(ctx, func() error {
		out = nil
		rows, err := s.db.QueryContext(ctx, queries.Get("queue_stats"))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var st storage.QueueStat
			var oldestUS int64
			if err := rows.Scan(&st.Destination, &st.Status, &st.Count, &st.Held, &oldestUS); err != nil {
				return err
			}
			st.OldestAge = time.Duration(oldestUS) * time.Microsecond
			out = append(out, st)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlserver: queue stats: %w", err)
	}
	return out, nil
}

// QueueLaneKeys implements storage.Store.
func (s *Store) QueueLaneKeys(ctx context.Context) (map[string]string, error) {
	var out map[string]string
	err := retryDeadlocks(ctx, func() (err error) {
		out, err = storage.LaneKeys(ctx, s.db, queries.Get("queue_lane_keys"))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlserver: queue lane keys: %w", err)
	}
	return out, nil
}

// QueueLaneKeyRecord implements storage.Store.
func (s *Store) QueueLaneKeyRecord(ctx context.Context, p storage.QueueLaneKeyRecordParams) error {
	if len(p.LaneKey) > storage.MaxLaneKeyBytes {
		return fmt.Errorf("sqlserver: queue lane key record: %d bytes, at most %d", len(p.LaneKey), storage.MaxLaneKeyBytes)
	}
	err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, queries.Get("queue_lane_key_record"),
			sql.Named("destination", p.Destination), sql.Named("lane_key", p.LaneKey))
		return err
	})
	return wrap("queue lane key record", err)
}

// QueueRelaneRead implements storage.Store.
func (s *Store) QueueRelaneRead(ctx context.Context, p storage.QueueRelaneReadParams) ([]storage.RelaneRow, error) {
	var out []storage.RelaneRow
	err := retryDeadlocks(ctx, func() error {
		out = nil
		rows, err := s.db.QueryContext(ctx, queries.Get("queue_relane_read"), sql.Named("destination", p.Destination),
			sql.Named("after_lane", p.AfterLane), sql.Named("after_id", p.AfterID), sql.Named("limit", p.Limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r storage.RelaneRow
			if err := rows.Scan(&r.ID, &r.Lane, &r.Inbound, &r.Payload); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlserver: queue relane read: %w", err)
	}
	return out, nil
}

// QueueRelane implements storage.Store: one statement per row, in one
// fenced transaction (a move is rare: a lane_key changed across a restart or
// a failover).
func (s *Store) QueueRelane(ctx context.Context, p storage.QueueRelaneParams) (int64, error) {
	var n int64
	err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
		n = 0
		for _, m := range p.Moves {
			var k int64
			if err := tx.QueryRowContext(ctx, queries.Get("queue_relane"), sql.Named("id", m.ID), sql.Named("new_lane", m.Lane)).Scan(&k); err != nil {
				return err
			}
			n += k
		}
		return nil
	})
	if err != nil {
		return 0, wrap("queue relane", err)
	}
	return n, nil
}

// OutboundHold implements storage.Store.
func (s *Store) OutboundHold(ctx context.Context, p storage.OutboundHoldParams) (storage.OutboundHeld, error) {
	if err := storage.CheckOutbound(p.Outbound); err != nil {
		return storage.OutboundHeld{}, err
	}
	h := storage.OutboundHeld{Outbound: p.Outbound}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var added int64
		if err := tx.QueryRowContext(ctx, queries.Get("outbound_hold"), sql.Named("outbound", p.Outbound)).Scan(&added, &h.Since); err != nil {
			return err
		}
		if added == 1 {
			_, err := bumpVersion(ctx, tx, storage.QueueVersionName)
			return err
		}
		return nil
	})
	if err != nil {
		return storage.OutboundHeld{}, wrap("outbound hold", err)
	}
	h.Since = utc(h.Since)
	return h, nil
}

// OutboundRelease implements storage.Store.
func (s *Store) OutboundRelease(ctx context.Context, p storage.OutboundReleaseParams) (bool, error) {
	var released bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		released = false // a deadlock victim's retry starts afresh
		var n int64
		if err := tx.QueryRowContext(ctx, queries.Get("outbound_release"), sql.Named("outbound", p.Outbound)).Scan(&n); err != nil || n == 0 {
			return err
		}
		released = true
		_, err := bumpVersion(ctx, tx, storage.QueueVersionName)
		return err
	})
	if err != nil {
		return false, wrap("outbound release", err)
	}
	return released, nil
}

// OutboundHolds implements storage.Store.
func (s *Store) OutboundHolds(ctx context.Context) ([]storage.OutboundHeld, error) {
	var out []storage.OutboundHeld
	err := retryDeadlocks(ctx, func() error {
		out = nil
		rows, err := s.db.QueryContext(ctx, queries.Get("outbound_holds"))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h storage.OutboundHeld
			if err := rows.Scan(&h.Outbound, &h.Since); err != nil {
				return err
			}
			h.Since = utc(h.Since)
			out = append(out, h)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, wrap("outbound holds", err)
	}
	return out, nil
}

// ConfigVersionBump implements storage.Store.
func (s *Store) ConfigVersionBump(ctx context.Context, p storage.ConfigVersionBumpParams) (int64, error) {
	var v int64
	err := retryDeadlocks(ctx, func() (err error) {
		v, err = bumpVersion(ctx, s.db, storage.ConfigName(p.Name))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlserver: config version bump: %w", err)
	}
	return v, nil
}

// ConfigVersionRead implements storage.Store.
func (s *Store) ConfigVersionRead(ctx context.Context, p storage.ConfigVersionReadParams) (int64, error) {
	var v int64
	err := retryDeadlocks(ctx, func() error {
		return s.db.QueryRowContext(ctx, queries.Get("config_version_read"), sql.Named("name", storage.ConfigName(p.Name))).Scan(&v)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlserver: config version read: %w", err)
	}
	return v, nil
}

// Secret implements storage.Store: an insert guarded against a value already
// stored (secret_insert.sql), then a read of the value that stands. Each
// statement is its own transaction, so the read sees the row committed by
// the insert or by the concurrent one it waited for.
func (s *Store) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	if err := storage.CheckSecret(name, fresh); err != nil {
		return nil, err
	}
	var v []byte
	err := retryDeadlocks(ctx, func() error {
		_, err := s.db.ExecContext(ctx, queries.Get("secret_insert"), sql.Named("name", name), sql.Named("value", fresh))
		if err != nil && !isDuplicateKey(err) { // the guard's lock makes this unlikely; the row is there all the same
			return err
		}
		return s.db.QueryRowContext(ctx, queries.Get("secret_read"), sql.Named("name", name)).Scan(&v)
	})
	if err != nil {
		return nil, fmt.Errorf("sqlserver: secret %q: %w", name, err)
	}
	return v, nil
}

// refusedNumbers are SQL Server's errors of the data a write carried: string
// or binary data would be truncated (2628, 8152), NULL into a NOT NULL
// column (515), a constraint (547), a conversion or an overflow (245, 8114,
// 8115), and mf's own for a row an operator's trigger skipped
// (errSkippedRow).
var refusedNumbers = map[int32]bool{2628: true, 8152: true, 515: true, 547: true, 245: true, 8114: true, 8115: true, errSkippedRow: true}

// errSkippedRow is message_ingest.sql's error for a row an INSTEAD OF
// trigger skipped.
const errSkippedRow = 51207

// refusal returns storage.ErrRefused for an error of the data the write
// carried, and nil for any other error.
func refusal(err error) error {
	if n, ok := errorNumber(err, func(n int32) bool { return refusedNumbers[n] }); ok {
		return storage.Refused(fmt.Sprintf("SQL Server error %d", n))
	}
	return nil
}

// isDuplicateKey reports a primary key or unique index violation.
func isDuplicateKey(err error) bool {
	_, ok := errorNumber(err, func(n int32) bool { return n == errDuplicateKey || n == errDuplicateIndexKey })
	return ok
}

// fullNumbers are SQL Server's errors of a database out of space: no page
// could be allocated in a filegroup (1101, 1105), the transaction log is
// full (9002).
var fullNumbers = map[int32]bool{1101: true, 1105: true, 9002: true}

// wrap adds the dialect and operation to an error, keeping the shared
// sentinels matchable with errors.Is, and marks a database out of space
// storage.ErrFull: the operator must hear where to free space.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if n, ok := errorNumber(err, func(n int32) bool { return fullNumbers[n] }); ok {
		return fmt.Errorf("sqlserver: %s: %w: free space on the database server (SQL Server error %d: a data or log file is full: free disk space, raise the file's MAXSIZE, or back up the log) (%w)", op, storage.ErrFull, n, err)
	}
	return fmt.Errorf("sqlserver: %s: %w", op, err)
}

// refusals says why a write of one queue row matched nothing. A skipped row
// found pending with none ahead any more was not the head as the skip ran
// and is now (or was in flight and was re-pended): a NotPending with its
// pending status, to try again.
var refusals = storage.QueueRefusals{Status: queries.Get("queue_status"), SkipRefused: queries.Get("queue_skip_refused"),
	ID: func(id int64) any { return sql.Named("id", id) }}

// plaintextRisk returns a host of another machine that cfg may reach
// without TLS, and why, or "" for none. go-mssqldb's default (encrypt
// false, optional, no, 0) encrypts the login packet only, and the rest
// unless the server forces encryption; disable encrypts nothing. The
// failover partner, if any, is dialled with the same settings.
func plaintextRisk(cfg msdsn.Config) (host, why string) {
	switch cfg.Encryption {
	case msdsn.EncryptionRequired, msdsn.EncryptionStrict:
		return "", ""
	case msdsn.EncryptionDisabled:
		why = "disable"
	default:
		why = "false (the default): only the login is encrypted, unless the server forces encryption"
	}
	// go-mssqldb has already made ".", "(local)" and an empty server
	// "localhost"; a failover partner is used as written (host\instance).
	partner, _, _ := strings.Cut(cfg.FailOverPartner, `\`)
	for _, h := range []string{cfg.Host, partner} {
		if h != "" && !storage.LocalHost(h) {
			return h, why
		}
	}
	return "", ""
}

// unverifiedRisk returns a host of another machine (the server or its
// failover partner) that cfg reaches over TLS that checks nothing of its
// certificate, or "" for none. Called once plaintextRisk found none.
func unverifiedRisk(cfg msdsn.Config) string {
	if cfg.TLSConfig == nil || !cfg.TLSConfig.InsecureSkipVerify || cfg.TLSConfig.VerifyPeerCertificate != nil {
		return "" // verified, or pinned (serverCertificate)
	}
	partner, _, _ := strings.Cut(cfg.FailOverPartner, `\`)
	for _, h := range []string{cfg.Host, partner} {
		if h != "" && !storage.LocalHost(h) {
			return h
		}
	}
	return ""
}

// connectorConfig parses the URL with the driver's own parser, so that its
// TLS settings (encrypt, TrustServerCertificate, certificate, hostNameInCertificate)
// mean exactly what go-mssqldb documents, then applies the password.
func connectorConfig(o Options) (msdsn.Config, error) {
	cfg, err := msdsn.Parse(o.URL)
	if err != nil {
		// msdsn's errors name the offending setting, never the password.
		return cfg, fmt.Errorf("sqlserver: parse store url: %w", err)
	}
	if o.Password != "" {
		cfg.Password = o.Password
	}
	if _, set := cfg.Parameters[msdsn.AppName]; !set && o.ApplicationName != "" {
		cfg.AppName = o.ApplicationName
	}
	// DATETIME2 carries no zone: every stored time is UTC, so decode it as
	// UTC whatever the URL's timezone setting (the dialect sends no times).
	cfg.Encoding.Timezone = time.UTC
	return cfg, nil
}

// Package postgres is the PostgreSQL dialect of storage.Store, on pgx/v5's
// pgxpool directly. Its SQL lives in the embedded sql/ and migrations/ files.
//
// Several nodes may share one PostgreSQL database (or one schema of it, named
// by search_path in the URL): this is the clustered store.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/storage"
)

//go:embed sql/*.sql
var sqlFS embed.FS

//go:embed migrations/*.sql
var migrationsFS embed.FS

var queries = storage.MustLoadQueries(sqlFS, "sql")

// Options configure Open.
type Options struct {
	// URL is a PostgreSQL connection URL or DSN. Runtime parameters such as
	// search_path may be given in it.
	URL string
	// Password, when set, overrides the URL's (it comes from
	// MF_STORE_PASSWORD, never from the command line).
	Password string
	// PoolSize is the pool's maximum number of connections (default 5).
	PoolSize int32
	// IdleInTransactionTimeout, when set, makes the server end a session
	// that stays inside a transaction without sending anything for this
	// long. A node frozen mid-transaction (SIGSTOP, a VM pause) otherwise
	// keeps its locks, the fence's lock on the lease row among them,
	// and the next election waits behind it for as long as the node is
	// frozen. None of the engine's transactions waits on anything but the
	// database, so a clustered node sets it to its fence timeout.
	IdleInTransactionTimeout time.Duration
	// ApplicationName, when set, names the sessions in pg_stat_activity
	// (mf run: "mf NODE_ID"), so that an operator can tell which node holds
	// a lock or which sessions to end. A URL that sets application_name
	// keeps its own.
	ApplicationName string
	// Log receives a warning when the URL lets connections to a server on
	// another host go unencrypted.
	Log zerolog.Logger
	// onNotice, when set, receives the server's notices (tests: the plans
	// auto_explain sends).
	onNotice pgconn.NoticeHandler
}

// Store is the PostgreSQL storage.Store.
type Store struct {
	pool *pgxpool.Pool
	// lease is the leader lease's own connection (a pool of one, opened
	// on first use, so never by a single node): an election, a renewal or
	// a resignation must not wait for a connection of pool, which the
	// graph's writes and the API's reads may all hold at once (for as long
	// as a maintenance lock makes them wait, say), past the trust window.
	lease *pgxpool.Pool
	lanes *laneBatcher   // the lanes' writes (lanebatch.go)
	log   zerolog.Logger // what Migrate says of its retries
	// clustered is set for a clustered node's store (its sessions carry
	// the fence timeout): only such a node opens lease and its resignation
	// listener's session besides pool (SessionLimits).
	clustered bool
	// single holds a single node's lock (HoldSingleNode).
	single storage.SingleNode
}

var _ storage.Store = (*Store)(nil)

// plaintextWarning is what Open logs, and mf check prints, of a store url
// that lets connections to another host go unencrypted.
const plaintextWarning = "the store url lets connections to the database go unencrypted, and they carry every message (PHI): set sslmode=verify-full in [store] url (with sslrootcert, the CA of the database's certificate, unless the system's roots hold it)"

// unverifiedWarning is what Open logs, and mf check prints, of a store url
// whose connections to another host are encrypted without any check of
// the server's certificate: pgx's sslmode=require without sslrootcert, as
// libpq's.
const unverifiedWarning = "the store url encrypts connections to the database without verifying its certificate (sslmode=require without sslrootcert): a machine on the path can pose as the database and read every message (PHI) and the password: set sslmode=verify-full in [store] url (with sslrootcert, the CA of the database's certificate, unless the system's roots hold it)"

// CheckURL refuses a store url that Open would refuse, and returns the
// warning Open would log of it (or ""), without connecting: mf check calls
// it, so that a config it passes does not fail at start unannounced.
func CheckURL(url string) (warning string, err error) {
	cfg, err := parseURL(url)
	if err != nil {
		return "", err
	}
	if host, why := plaintextRisk(cfg.ConnConfig); why != "" {
		return fmt.Sprintf("%s (host %s, sslmode %s)", plaintextWarning, host, why), nil
	}
	if host := unverifiedRisk(cfg.ConnConfig); host != "" {
		return fmt.Sprintf("%s (host %s)", unverifiedWarning, host), nil
	}
	return "", nil
}

// parseURL parses a store url as Open uses it.
func parseURL(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse store url: %s", withoutConnString(err))
	}
	// pgxpool reads a pool size from the URL, which PoolSize ([store]
	// pool_size, 5 unless set) would replace without a word.
	if cc, err := pgx.ParseConfig(url); err == nil {
		if v, ok := cc.RuntimeParams["pool_max_conns"]; ok {
			return nil, fmt.Errorf("postgres: the store url sets pool_max_conns=%s, which [store] pool_size sets instead: remove it from the url and set pool_size = %s", v, v)
		}
	}
	return cfg, nil
}

// withoutConnString is the text of pgx's error about a store url that does
// not parse, without the url: pgx quotes it whole and masks only the
// passwords it recognises (not "password = S3cret", which libpq takes), and
// the error reaches mf check's and mf run's output. What follows the url is
// pgx's reason; the last "`: " is cut at, so a password holding one is cut
// away too.
func withoutConnString(err error) string {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return err.Error()
	}
	text := pce.Error()
	if i := strings.LastIndex(text, "`: "); i >= 0 {
		return text[i+len("`: "):]
	}
	return "it does not parse"
}

// Open connects a pool. It does not migrate: call Migrate.
func Open(ctx context.Context, o Options) (*Store, error) {
	cfg, err := parseURL(o.URL)
	if err != nil {
		return nil, err
	}
	if o.Password != "" {
		cfg.ConnConfig.Password = o.Password
	}
	if host, why := plaintextRisk(cfg.ConnConfig); why != "" {
		o.Log.Warn().Str("host", host).Str("sslmode", why).Msg(plaintextWarning)
	} else if host := unverifiedRisk(cfg.ConnConfig); host != "" {
		o.Log.Warn().Str("host", host).Msg(unverifiedWarning)
	}
	if o.onNotice != nil {
		cfg.ConnConfig.OnNotice = o.onNotice
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set && o.ApplicationName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = o.ApplicationName
	}
	// Run on every new session, in order. A DBA's statement_timeout for
	// mf's role goes first, as it would cut the others short.
	var afterConnect []func(context.Context, *pgconn.PgConn) error
	if _, set := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !set {
		afterConnect = append(afterConnect, func(ctx context.Context, c *pgconn.PgConn) error {
			if err := c.Exec(ctx, queries.Get("session_statement_timeout")).Close(); err != nil {
				return fmt.Errorf("postgres: set statement_timeout: %w", err)
			}
			return nil
		})
	}
	afterConnect = append(afterConnect, (&durability{log: o.Log}).ensure)
	// Set once connected, not sent with the startup: a pooler (PgBouncer)
	// refuses a startup parameter it does not know, and mf could not
	// connect through one at all. A URL that sets one of them keeps its own
	// (idle_in_transaction_session_timeout excepted: the fence needs it).
	// lock_timeout and idle_session_timeout are 0 whatever mf's role has:
	// every store call has its own deadline, a fence waits for the table
	// locks of maintenance by design, and the resignation listener sits
	// idle on its session. mf's statements are written for read committed
	// (the fence's lock on the lease row, each claim's own): a role's
	// serializable made concurrent writes fail (40001), AE to senders.
	settings := map[string]string{"lock_timeout": "0", "idle_session_timeout": "0", "default_transaction_isolation": "read committed"}
	if o.IdleInTransactionTimeout > 0 {
		// That timeout does not run for a session the server is reading a
		// pipelined batch from (the fence and its writes, one Sync at the
		// end: the session is active until the Sync). A client cut off in
		// the middle of one (a network gone, a host powered off) is found
		// by TCP keepalive, whose default is two hours: these make the
		// server drop it within about the same timeout.
		secs := max(int64(o.IdleInTransactionTimeout/time.Second), 3)
		for param, v := range map[string]int64{"tcp_keepalives_idle": secs / 2, "tcp_keepalives_interval": max(secs/6, 1), "tcp_keepalives_count": 3} {
			settings[param] = fmt.Sprint(v)
		}
	}
	var names, values []string
	for name, v := range settings {
		if _, set := cfg.ConnConfig.RuntimeParams[name]; !set {
			names, values = append(names, name), append(values, v)
		}
	}
	if o.IdleInTransactionTimeout > 0 {
		names, values = append(names, "idle_in_transaction_session_timeout"), append(values, fmt.Sprint(o.IdleInTransactionTimeout.Milliseconds()))
	}
	afterConnect = append(afterConnect, func(ctx context.Context, c *pgconn.PgConn) error {
		return setSession(ctx, c, names, values)
	})
	if o.IdleInTransactionTimeout > 0 {
		if _, set := cfg.ConnConfig.RuntimeParams["client_connection_check_interval"]; !set {
			afterConnect = append(afterConnect, func(ctx context.Context, c *pgconn.PgConn) error {
				if err := c.Exec(ctx, queries.Get("session_connection_check")).Close(); err != nil {
					return fmt.Errorf("postgres: set client_connection_check_interval: %w", err)
				}
				return nil
			})
		}
		// Keepalive probes nothing while the server has output the client
		// has not acknowledged (results of the batch's first statements):
		// the retransmissions give up after about 15 minutes. This makes
		// them give up within the same timeout. Set after connecting, as
		// a server older than 12 refuses it as a startup parameter.
		if _, set := cfg.ConnConfig.RuntimeParams["tcp_user_timeout"]; !set {
			secs := max(int64(o.IdleInTransactionTimeout/time.Second), 3)
			afterConnect = append(afterConnect, func(ctx context.Context, c *pgconn.PgConn) error {
				return setTCPUserTimeout(ctx, c, secs*1000, tcpUserTimeoutSince)
			})
		}
	}
	// The lease pool and the listener copy this config, hook included.
	cfg.ConnConfig.AfterConnect = func(ctx context.Context, c *pgconn.PgConn) error {
		for _, f := range afterConnect {
			if err := f(ctx, c); err != nil {
				return err
			}
		}
		return nil
	}
	cfg.MaxConns = o.PoolSize
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 5
	}
	leaseCfg := cfg.Copy()
	leaseCfg.MaxConns, leaseCfg.MinConns, leaseCfg.MinIdleConns = 1, 0, 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open pool to %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	lease, err := pgxpool.NewWithConfig(ctx, leaseCfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open the lease's connection to %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	s := &Store{pool: pool, lease: lease, log: o.Log, clustered: o.IdleInTransactionTimeout > 0}
	s.single.Dialect, s.single.Log = "postgres", o.Log
	s.lanes = newLaneBatchers(s)
	return s, nil
}

// plaintextRisk returns a host of another machine that cc may reach
// without TLS, and why (pgx's sslmode prefer, its default, and allow fall
// back to plaintext; disable never encrypts), or "" for none. A Unix socket
// or a loopback address stays on this machine.
func plaintextRisk(cc *pgx.ConnConfig) (host, why string) {
	configs := []*pgconn.FallbackConfig{{Host: cc.Host, TLSConfig: cc.TLSConfig}}
	configs = append(configs, cc.Fallbacks...)
	why = "disable"
	for _, c := range configs {
		if c.TLSConfig != nil {
			why = "prefer or allow (prefer is the default): plaintext when TLS is refused"
		}
	}
	for _, c := range configs {
		if c.TLSConfig == nil && !isLocalHost(c.Host) {
			return c.Host, why
		}
	}
	return "", ""
}

// unverifiedRisk returns a host of another machine that cc reaches over
// TLS that checks nothing of its certificate (pgx skips the check and sets
// no check of its own), or "" for none. Called once plaintextRisk found
// none: prefer and allow check nothing either.
func unverifiedRisk(cc *pgx.ConnConfig) string {
	configs := []*pgconn.FallbackConfig{{Host: cc.Host, TLSConfig: cc.TLSConfig}}
	configs = append(configs, cc.Fallbacks...)
	for _, c := range configs {
		if c.TLSConfig != nil && c.TLSConfig.InsecureSkipVerify && c.TLSConfig.VerifyPeerCertificate == nil && !isLocalHost(c.Host) {
			return c.Host
		}
	}
	return ""
}

func isLocalHost(host string) bool {
	return strings.HasPrefix(host, "/") || storage.LocalHost(host)
}

// Pool exposes the pool for the few PostgreSQL-only features (LISTEN).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Dialect implements storage.Store.
func (s *Store) Dialect() string { return "postgres" }

// Clusterable implements storage.Store.
func (s *Store) Clusterable() bool { return true }

// ClaimAhead implements storage.Store: 7, a run of 8 rows per claim. Each
// claim statement costs PostgreSQL about 17 µs besides its rows (30.5 µs for
// one row at 32 connections, pg_stat_statements), and a run of 16 cost 23 µs
// a row in one statement; bench/run's 32-connection load delivered 8,788 to
// 9,431 messages/s with runs against 7,726 to 8,359 without (four A/B
// pairs), at 77 µs of PostgreSQL CPU a message against 88 to 94. Bounded,
// since a lane holds a run's messages in memory.
func (s *Store) ClaimAhead() int { return 7 }

// Close implements storage.Store.
func (s *Store) Close() error {
	s.single.Close()
	s.pool.Close()
	s.lease.Close()
	return nil
}

// Ping implements storage.Store.
func (s *Store) Ping(ctx context.Context) error {
	var n int64
	var readOnly bool
	if err := s.pool.QueryRow(ctx, queries.Get("ping")).Scan(&n, &readOnly); err != nil {
		return fmt.Errorf("postgres: ping (is the store migrated?): %w", explain(err))
	}
	if n != 1 {
		return fmt.Errorf("postgres: ping: %d leader lease rows, want 1", n)
	}
	if readOnly {
		return fmt.Errorf("postgres: ping: %w %s", storage.ErrReadOnly, readOnlyAdvice)
	}
	return nil
}

// SchemaCheck implements storage.Store.
func (s *Store) SchemaCheck(ctx context.Context) error {
	migrations, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	done, err := appliedMigrations(ctx, s.pool)
	if err != nil {
		return err
	}
	return storage.CheckSchema(migrations, done)
}

// appliedMigrations reads the versions recorded in mf_schema_migrations,
// with the pool or in a transaction.
func appliedMigrations(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (map[int]bool, error) {
	rows, err := q.Query(ctx, queries.Get("migrate_applied"))
	if err != nil {
		return nil, fmt.Errorf("postgres: read applied migrations: %w", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("postgres: read applied migrations: %w", err)
	}
	done := map[int]bool{}
	for _, v := range applied {
		done[int(v)] = true
	}
	return done, nil
}

// Migrate implements storage.Store: every pending migration in one
// transaction, under a transaction-scoped advisory lock (PostgreSQL DDL is
// transactional, so a failed migration leaves nothing behind). On a schema
// with nothing pending it changes nothing, so a node may run as a role that
// cannot change the schema once a role that can has run mf migrate.
//
// Pending migrations on a schema in use wait for the locks of the nodes
// still running (a rolling upgrade), and their writes wait for them: each
// lock is waited for at most migrateLockTimeout, so that a long transaction
// elsewhere does not stall the primary behind the migration, and a lock
// timeout or a deadlock (a write of an older primary, whose fence takes the
// lease row before the tables) rolls the migrations back and tries them
// again, up to migrateAttempts times.
func (s *Store) Migrate(ctx context.Context) error {
	migrations, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	err = storage.MigrateRetry(ctx, s.log, migrateAttempts, time.Second, "pg_stat_activity for what holds mf_messages, mf_queue or mf_leader_lease",
		lockConflict, func() error { return s.migrateOnce(ctx, migrations) })
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
		return fmt.Errorf("%w: the store's role lacks a privilege on the schema: to apply migrations it must be the schema's owner (run mf migrate with a [store] url whose role is, then start mf again); "+
			"to run on a migrated schema it needs USAGE on the schema, SELECT, INSERT, UPDATE, DELETE on mf's tables and USAGE on their sequences", err)
	case readOnly(err):
		return fmt.Errorf("%w: %s", err, hints["25006"])
	case lockConflict(err):
		return fmt.Errorf("%w: the migrations could not take their locks in %d attempts: another session holds mf_messages, mf_queue or mf_leader_lease (see pg_stat_activity); run mf migrate again once it ends", err, migrateAttempts)
	case errors.As(err, &pgErr) && pgErr.Code == "3F000": // invalid_schema_name
		return fmt.Errorf("%w: no schema of the store url's search_path exists (unset, it is \"$user\", public): create the schema, or correct search_path", err)
	}
	return err
}

// migrateAttempts and migrateLockTimeout bound Migrate's waits for locks of
// other sessions (Migrate).
const (
	migrateAttempts    = 30
	migrateLockTimeout = 2 * time.Second
)

// onDeadlockAgain runs tx, a whole transaction, again (up to 3 times) when
// PostgreSQL ends it as a deadlock's victim (40P01). An operator's resend
// and resend-dead of the same destination can meet so: the resend holds the
// ingest lock and marks the message's dead rows, while the resend-dead holds
// a row of them, which died after the resend's first statement, and waits
// for the ingest lock. Run again, the second finds the first's rows
// resent (resent_as) and leaves them, as one that had waited would.
func onDeadlockAgain(tx func() error) error {
	var err error
	for range 3 {
		var pgErr *pgconn.PgError
		if err = tx(); !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
	}
	return err
}

// lockConflict reports a deadlock (40P01) or a lock timeout (55P03): the
// migrations met another session's locks.
func lockConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "55P03")
}

// migrateOnce is one attempt of Migrate, in one transaction.
func (s *Store) migrateOnce(ctx context.Context, migrations []storage.Migration) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, queries.Get("migrate_lock")); err != nil {
			return fmt.Errorf("postgres: take migration lock: %w", err)
		}
		var exists bool
		if err := tx.QueryRow(ctx, queries.Get("migrate_table_exists")).Scan(&exists); err != nil {
			return fmt.Errorf("postgres: look for mf_schema_migrations: %w", err)
		}
		if !exists {
			if _, err := tx.Exec(ctx, queries.Get("migrate_table")); err != nil {
				return fmt.Errorf("postgres: create mf_schema_migrations: %w", err)
			}
		}
		done, err := appliedMigrations(ctx, tx)
		if err != nil {
			return err
		}
		if err := storage.CheckApplied(migrations, done); err != nil {
			return err
		}
		pending := slices.ContainsFunc(migrations, func(m storage.Migration) bool { return !done[m.Version] })
		if pending && done[1] { // 0001 made the tables: a schema in use
			if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", migrateLockTimeout.Milliseconds())); err != nil {
				return fmt.Errorf("postgres: set the migrations' lock_timeout: %w", err)
			}
			// Only a role that may change the tables takes them: one that
			// may only read and write them would stall the primary's writes
			// and then fail on the first migration anyway.
			var owner bool
			if err := tx.QueryRow(ctx, queries.Get("migrate_may_alter")).Scan(&owner); err != nil {
				return fmt.Errorf("postgres: look up the owner of mf_queue: %w", err)
			}
			if owner {
				if _, err := tx.Exec(ctx, queries.Get("migrate_lock_tables")); err != nil {
					return fmt.Errorf("postgres: lock mf_messages and mf_queue for the migrations: %w", err)
				}
			}
		}
		for _, m := range migrations {
			if done[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("postgres: apply migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, queries.Get("migrate_record"), m.Version, m.Name); err != nil {
				return fmt.Errorf("postgres: record migration %s: %w", m.Name, err)
			}
		}
		return nil
	})
}

// fenced runs fn in a transaction that first checks the fence (fence.sql) and
// holds the lease row (FOR KEY SHARE) until commit. A mismatch is ErrFenced and the
// transaction is rolled back. A single node's write (the zero fence) is
// refused, before any statement, while the node does not know it holds its
// lock (storage.SingleNode.RefuseUnheld).
func (s *Store) fenced(ctx context.Context, f storage.Fence, fn func(tx pgx.Tx) error) error {
	if err := s.single.RefuseUnheld(f.Owner, f.Term); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, queries.Get("fence"), f.Owner, f.Term).Scan(&one); err != nil {
			return fenceError(err)
		}
		return fn(tx)
	})
}

// fencedBatch is fenced in one round trip, for the hot paths (ingest, the
// lanes' batches, claim updates): the fence and the statements queued on b
// go out as one pipelined batch, which PostgreSQL runs as one implicit transaction. The
// fence raises when it fails, so that transaction aborts before any write
// of it runs. read takes the statements' results in order.
func (s *Store) fencedBatch(ctx context.Context, f storage.Fence, queue func(b *pgx.Batch), read func(br pgx.BatchResults) error) error {
	if err := s.single.RefuseUnheld(f.Owner, f.Term); err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(queries.Get("fence"), f.Owner, f.Term)
	queue(b)
	br := s.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return fenceError(err)
	}
	if err := read(br); err != nil {
		br.Close()
		return err
	}
	return br.Close() // the implicit transaction commits at the batch's end
}

// fenceError maps the fence's failure (SQLSTATE MF001, raised by mf_fence)
// to storage.ErrFenced.
func fenceError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "MF001" {
		return storage.ErrFenced
	}
	return fmt.Errorf("postgres: fence check: %w", err)
}

func scanLease(row pgx.Row, extra ...any) (storage.Lease, error) {
	var l storage.Lease
	dest := append([]any{&l.Owner, &l.Term, &l.AcquiredAt, &l.ExpiresAt, &l.DBNow}, extra...)
	if err := row.Scan(dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return l, storage.ErrNotFound
		}
		return l, err
	}
	return l, nil
}

// LeaseAttemptElect implements storage.Store. It elects nobody while a
// single node holds this schema's lock (lease_attempt_elect.sql takes it
// shared): storage.ErrSingleNodeRunning, with the lease as it stands.
func (s *Store) LeaseAttemptElect(ctx context.Context, p storage.LeaseAttemptElectParams) (storage.Lease, bool, error) {
	var elected, free bool
	l, err := scanLease(s.lease.QueryRow(ctx, queries.Get("lease_attempt_elect"), p.Owner, storage.Seconds(p.TTL)), &elected, &free)
	if err != nil {
		return l, false, fmt.Errorf("postgres: lease elect for %s: %w", p.Owner, explain(err))
	}
	if !free {
		return l, false, fmt.Errorf("postgres: lease elect for %s: %w (it holds this schema's single-node lock): stop it, or enable [cluster] on it", p.Owner, storage.ErrSingleNodeRunning)
	}
	if !elected && l.Remaining() <= 0 {
		// Lost a race: the UPDATE waited for the winner's lock and found
		// its lease live, but the SELECT branch reads the statement's
		// snapshot, from before the winner committed: the lease as it was,
		// expired. Read it again (a new snapshot), or the follower, told
		// the lease had no time left, tried again at once instead of
		// waiting for the winner's lease.
		// A failed read leaves the answer as it was: the attempt itself
		// succeeded, and the follower only retries sooner.
		if again, err := scanLease(s.lease.QueryRow(ctx, queries.Get("lease_read"))); err == nil {
			l = again
		}
	}
	return l, elected, nil
}

// LeaseAttemptRenew implements storage.Store.
func (s *Store) LeaseAttemptRenew(ctx context.Context, p storage.LeaseAttemptRenewParams) (storage.Lease, error) {
	l, err := scanLease(s.lease.QueryRow(ctx, queries.Get("lease_attempt_renew"), p.Owner, p.Term, storage.Seconds(p.TTL)))
	if errors.Is(err, storage.ErrNotFound) {
		return l, storage.ErrLeaseLost
	}
	if err != nil {
		return l, fmt.Errorf("postgres: lease renew for term %d: %w", p.Term, explain(err))
	}
	return l, nil
}

// LeaseResign implements storage.Store.
func (s *Store) LeaseResign(ctx context.Context, p storage.LeaseResignParams) (bool, error) {
	tag, err := s.lease.Exec(ctx, queries.Get("lease_resign"), p.Owner, p.Term)
	if err != nil {
		return false, fmt.Errorf("postgres: lease resign for term %d: %w", p.Term, explain(err))
	}
	return tag.RowsAffected() > 0, nil
}

// LeaseRead implements storage.Store.
func (s *Store) LeaseRead(ctx context.Context) (storage.Lease, error) {
	l, err := scanLease(s.pool.QueryRow(ctx, queries.Get("lease_read")))
	if err != nil {
		return l, fmt.Errorf("postgres: lease read: %w", explain(err))
	}
	return l, nil
}

// NodeHeartbeat implements storage.Store.
func (s *Store) NodeHeartbeat(ctx context.Context, p storage.NodeHeartbeatParams) error {
	if _, err := s.pool.Exec(ctx, queries.Get("node_heartbeat"), p.NodeID, p.Host, p.PID, p.IsLeader, p.ConfigVersion, p.Started, p.ConfigFingerprint, p.ConfigFailedVersion, p.ConfigError); err != nil {
		return fmt.Errorf("postgres: node heartbeat for %s: %w", p.NodeID, explain(err))
	}
	return nil
}

// NodeLeave implements storage.Store.
func (s *Store) NodeLeave(ctx context.Context, p storage.NodeLeaveParams) error {
	tag, err := s.pool.Exec(ctx, queries.Get("node_leave"), p.NodeID)
	if err != nil {
		return fmt.Errorf("postgres: node leave for %s: %w", p.NodeID, explain(err))
	}
	if tag.RowsAffected() == 0 {
		return storage.ErrNotFound
	}
	return nil
}

// NodeList implements storage.Store.
func (s *Store) NodeList(ctx context.Context) (storage.NodeList, error) {
	var out storage.NodeList
	rows, err := s.pool.Query(ctx, queries.Get("node_list"))
	if err != nil {
		return out, fmt.Errorf("postgres: node list: %w", explain(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, host, status, fp, cfgError *string
			pid, cfgVersion, cfgFailed     *int64
			startedAt, lastSeen            *time.Time
			isLeader                       *bool
		)
		if err := rows.Scan(&out.DBNow, &id, &host, &pid, &status, &startedAt, &lastSeen, &isLeader, &cfgVersion, &fp, &cfgFailed, &cfgError); err != nil {
			return out, fmt.Errorf("postgres: node list: %w", err)
		}
		if id == nil { // the clock row of an empty table
			continue
		}
		out.Nodes = append(out.Nodes, storage.Node{
			NodeID: *id, Host: *host, PID: *pid, Status: *status, StartedAt: *startedAt,
			LastSeen: *lastSeen, IsLeader: *isLeader, ConfigVersion: *cfgVersion, ConfigFingerprint: *fp,
			ConfigFailedVersion: *cfgFailed, ConfigError: *cfgError,
		})
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("postgres: node list: %w", err)
	}
	return out, nil
}

// setSession sets the session parameters names to values, those the
// server has (session_settings.sql).
func setSession(ctx context.Context, c *pgconn.PgConn, names, values []string) error {
	m := pgtype.NewMap()
	var args [2][]byte
	for i, v := range [][]string{names, values} {
		b, err := m.Encode(pgtype.TextArrayOID, pgtype.TextFormatCode, v, nil)
		if err != nil {
			return fmt.Errorf("postgres: set the session's parameters: %w", err)
		}
		args[i] = b
	}
	err := c.ExecParams(ctx, queries.Get("session_settings"), args[:], []uint32{pgtype.TextArrayOID, pgtype.TextArrayOID}, nil, nil).Read().Err
	if err != nil {
		return fmt.Errorf("postgres: set the session's parameters %v: %w", names, err)
	}
	return nil
}

// tcpUserTimeoutSince is the first server_version_num with tcp_user_timeout.
const tcpUserTimeoutSince = 120000

// setTCPUserTimeout sets c's tcp_user_timeout to ms if the server's
// server_version_num is at least since, and leaves it alone otherwise.
func setTCPUserTimeout(ctx context.Context, c *pgconn.PgConn, ms int64, since int) error {
	args := [][]byte{[]byte(fmt.Sprint(ms)), []byte(fmt.Sprint(since))}
	if err := c.ExecParams(ctx, queries.Get("session_tcp_user_timeout"), args, nil, nil, nil).Read().Err; err != nil {
		return fmt.Errorf("postgres: set tcp_user_timeout: %w", err)
	}
	return nil
}

// MessageIngest implements storage.Store: the fence, the ingest lock and
// one set-based statement for the whole batch, in one round trip.
func (s *Store) MessageIngest(ctx context.Context, p storage.MessageIngestParams) ([]storage.IngestedMessage, error) {
	n := len(p.Messages)
	var (
		inbound, controlID, msgType, status, msgErr = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		payload                                     = make([][]byte, n)
		msgOf                                       []int64
		dests, lanes                                []string
	)
	for i, m := range p.Messages {
		inbound[i], controlID[i], msgType[i], payload[i], status[i], msgErr[i] = m.Inbound, m.ControlID, m.MessageType, m.Payload, m.Status, m.Error
		if payload[i] == nil {
			payload[i] = []byte{} // NOT NULL: an empty message is stored empty
		}
		for _, d := range m.Deliveries {
			msgOf, dests, lanes = append(msgOf, int64(i+1)), append(dests, d.Destination), append(lanes, d.Lane)
		}
	}
	out := make([]storage.IngestedMessage, 0, n)
	err := s.fencedBatch(ctx, p.Fence, func(b *pgx.Batch) {
		b.Queue(queries.Get("message_ingest_lock"))
		b.Queue(queries.Get("message_ingest"), inbound, controlID, msgType, payload, status, msgErr, msgOf, dests, lanes)
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("take ingest lock: %w", err)
		}
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("insert %d messages: %w", n, err)
		}
		defer rows.Close()
		for rows.Next() {
			var m storage.IngestedMessage
			if err := rows.Scan(&m.MessageID, &m.QueueIDs); err != nil {
				return fmt.Errorf("insert %d messages: %w", n, err)
			}
			out = append(out, m)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("insert %d messages: %w", n, err)
		}
		if len(out) != n {
			return fmt.Errorf("insert %d messages: %d stored", n, len(out))
		}
		return nil
	})
	if err != nil {
		if r := refusal(err); r != nil {
			err = r // not the driver's message: it may quote the value
		}
		return nil, wrap("message ingest", err)
	}
	return out, nil
}

// refusal returns storage.ErrRefused for an error of the data the write
// carried (refusedRows), and nil for any other error: the fence, a lost
// connection, a timeout, and errors of the database's state.
func refusal(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !refusedRows(pgErr.Code) {
		return nil
	}
	if pgErr.Code == "22P02" && strings.Contains(pgErr.Message, skippedRowMark) {
		return storage.Refused("a trigger skipped a row of the message, in mf_messages or mf_queue")
	}
	what := "SQLSTATE " + pgErr.Code
	for _, name := range []string{pgErr.TableName, pgErr.ColumnName, pgErr.ConstraintName} {
		if name != "" {
			what += " " + name
		}
	}
	return storage.Refused(what)
}

// skippedRowMark is in the error message_ingest.sql makes when a trigger
// skipped a row it inserts.
const skippedRowMark = "mf: a trigger skipped a row of message "

// refusedRows says whether SQLSTATE code refuses a statement for the rows it
// writes, so that other rows would pass: classes 22 data exception (a value
// the column cannot hold), 23 integrity constraint violation (NOT NULL,
// CHECK, an operator's foreign key or exclusion), 27 triggered data change,
// 44 check option, 54 program limit exceeded (an index row too large) and P0
// raised by PL/pgSQL (an operator's trigger turning a row away). The ingest
// answers such a message AR, which its sender does not resend, so the codes
// of those classes that come of the database's state and would meet every
// row alike are not: a unique violation (23505, a sequence behind its table)
// and a sequence used up (2200H).
func refusedRows(code string) bool {
	if len(code) != 5 || code == "23505" || code == "2200H" {
		return false
	}
	switch code[:2] {
	case "22", "23", "27", "44", "54", "P0":
		return true
	}
	return false
}

func queueRowDest(r *storage.QueueRow) []any {
	return []any{&r.ID, &r.MessageID, &r.Destination, &r.Lane, &r.Status, &r.Attempts, &r.NextAttemptAt,
		&r.LeaseOwner, &r.LeaseExpiresAt, &r.LastError, &r.CreatedAt, &r.UpdatedAt, &r.Held}
}

// MessageRead implements storage.Store. The message and its queue rows come
// from one snapshot (a read-only REPEATABLE READ transaction, which never
// fails to serialise): read in two, a purge committed in between left the
// message without its rows, a message delivered shown as sent nowhere.
func (s *Store) MessageRead(ctx context.Context, id int64) (storage.MessageDetail, error) {
	var d storage.MessageDetail
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		m := &d.Message
		err := tx.QueryRow(ctx, queries.Get("message_read"), id).Scan(
			&m.ID, &m.Inbound, &m.ReceivedAt, &m.ControlID, &m.MessageType, &m.Payload, &m.Status, &m.Error)
		if errors.Is(err, pgx.ErrNoRows) {
			return storage.ErrNotFound
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, queries.Get("queue_by_message"), id)
		if err != nil {
			return fmt.Errorf("queue rows: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r storage.QueueRow
			if err := rows.Scan(append(queueRowDest(&r), &r.LastErrorDetail, &r.ResentAs)...); err != nil {
				return fmt.Errorf("queue rows: %w", err)
			}
			d.Queue = append(d.Queue, r)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("queue rows: %w", err)
		}
		return nil
	})
	if errors.Is(err, storage.ErrNotFound) {
		return storage.MessageDetail{}, err
	}
	if err != nil {
		return storage.MessageDetail{}, fmt.Errorf("postgres: message read %d: %w", id, err)
	}
	return d, nil
}

// MessageSearch implements storage.Store: one statement, so one snapshot
// (message_search.sql).
func (s *Store) MessageSearch(ctx context.Context, p storage.MessageSearchParams) ([]storage.MessageSummary, error) {
	if err := p.CheckSearch(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, queries.Get("message_search"), p.Since, p.SearchUntil(), p.ControlID, p.Inbound, p.Status, p.SearchBefore(), p.Limit)
	if err != nil {
		return nil, wrap("message search", err)
	}
	defer rows.Close()
	var out []storage.MessageSummary
	for rows.Next() {
		var (
			m              storage.Message
			qID            *int64
			qDest, qStatus *string
		)
		if err := rows.Scan(&m.ID, &m.Inbound, &m.ReceivedAt, &m.ControlID, &m.MessageType, &m.Status, &m.Error, &qID, &qDest, &qStatus); err != nil {
			return nil, wrap("message search", err)
		}
		out = storage.AppendSummary(out, m, qID, qDest, qStatus)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("message search", err)
	}
	return out, nil
}

// MessageResend implements storage.Store: the lock that keeps the purge off
// the message (message_resend_lock.sql), the ingest lock (as MessageIngest
// takes it), the rows, the mark of the dead rows resent
// (message_resend_mark.sql) and the queue's version, in one transaction. Not fenced: an operator acts through any node's API.
func (s *Store) MessageResend(ctx context.Context, p storage.MessageResendParams) ([]int64, error) {
	dests, lanes := make([]string, len(p.Deliveries)), make([]string, len(p.Deliveries))
	for i, d := range p.Deliveries {
		dests[i], lanes[i] = d.Destination, d.Lane
	}
	var ids []int64
	err := onDeadlockAgain(func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// The rows first: a purge deleting them makes this wait, and no
			// ingest should wait behind that.
			if _, err := tx.Exec(ctx, queries.Get("message_resend_lock"), p.MessageID); err != nil {
				return fmt.Errorf("lock the message's queue rows: %w", err)
			}
			if _, err := tx.Exec(ctx, queries.Get("message_ingest_lock")); err != nil {
				return fmt.Errorf("take ingest lock: %w", err)
			}
			var queued bool
			if err := tx.QueryRow(ctx, queries.Get("message_resend_queued"), p.MessageID).Scan(&queued); err != nil {
				return err
			}
			if !queued {
				return storage.ErrNotFound // no such message, or its rows are purged
			}
			rows, err := tx.Query(ctx, queries.Get("message_resend"), p.MessageID, dests, lanes)
			if err != nil {
				return err
			}
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return err
			}
			if len(ids) != len(p.Deliveries) {
				return fmt.Errorf("%d queue rows stored for %d deliveries", len(ids), len(p.Deliveries))
			}
			slices.Sort(ids) // given in delivery order; RETURNING has none
			if _, err := tx.Exec(ctx, queries.Get("message_resend_mark"), p.MessageID, dests, ids); err != nil {
				return fmt.Errorf("mark the dead rows resent: %w", err)
			}
			_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
			return err
		})
	})
	if errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	if err != nil {
		if r := refusal(err); r != nil {
			err = r // not the driver's message: it may quote the value
		}
		return nil, wrap(fmt.Sprintf("message resend of %d", p.MessageID), err)
	}
	return ids, nil
}

// QueueResendDead implements storage.Store (storage.ResendDead): each
// transaction locks its dead rows (queue_resend_dead_pick.sql), gives each
// the lane of the routes in force (p.Lane), takes the ingest lock (as
// MessageResend, after the rows), inserts the new rows, marks the dead
// ones and bumps the queue's version. Not fenced: an operator acts through
// any node's API.
func (s *Store) QueueResendDead(ctx context.Context, p storage.QueueResendDeadParams) (storage.ResentDead, error) {
	if p.Lane == nil {
		return storage.ResentDead{}, storage.ErrNoResendLane
	}
	res, err := storage.ResendDead(p.Limit, func(after, before int64, n int) (c storage.ResendChunk, err error) {
		err = onDeadlockAgain(func() error {
			c = storage.ResendChunk{}
			return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, queries.Get("queue_resend_dead_pick"), p.Destination, after, before,
					optionalTime(p.Since), optionalTime(p.Until), n)
				if err != nil {
					return err
				}
				var dead []storage.DeadRow
				for rows.Next() {
					var d storage.DeadRow
					if err := rows.Scan(&d.ID, &d.MessageID, &d.Lane, &d.Inbound, &d.Payload); err != nil {
						rows.Close()
						return err
					}
					dead = append(dead, d)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return err
				}
				var resend []storage.DeadRow
				resend, c = p.Relane(dead)
				if len(resend) == 0 {
					return nil
				}
				msgs, lanes := make([]int64, len(resend)), make([]string, len(resend))
				for i, d := range resend {
					c.Old, msgs[i], lanes[i] = append(c.Old, d.ID), d.MessageID, d.Lane
				}
				if _, err := tx.Exec(ctx, queries.Get("message_ingest_lock")); err != nil {
					return fmt.Errorf("take ingest lock: %w", err)
				}
				ins, err := tx.Query(ctx, queries.Get("queue_resend_dead_insert"), p.Destination, msgs, lanes)
				if err != nil {
					return err
				}
				if c.New, err = pgx.CollectRows(ins, pgx.RowTo[int64]); err != nil {
					return err
				}
				if len(c.New) != len(c.Old) {
					return fmt.Errorf("%d queue rows stored for %d dead rows", len(c.New), len(c.Old))
				}
				slices.Sort(c.New) // given in the dead rows' order; RETURNING has none
				if _, err := tx.Exec(ctx, queries.Get("queue_resend_dead_mark"), c.Old, c.New); err != nil {
					return err
				}
				_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
				return err
			})
		})
		if err != nil {
			return storage.ResendChunk{}, err
		}
		return c, nil
	})
	if err != nil {
		if r := refusal(err); r != nil {
			err = r // not the driver's message: it may quote the value
		}
		return res, wrap(fmt.Sprintf("resend of %s's dead rows", p.Destination), err)
	}
	return res, nil
}

// optionalTime is t, or NULL for the zero time.
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// MessagePurge implements storage.Store: at most p.Limit rows of each
// table, in transactions of at most storage.PurgeChunk rows each
// (storage.Purge). The sweeper's 10,000 rows in one transaction held their
// row locks (a resend of one of those messages waits for them) and the
// fence's lock on the lease row for the whole call, 2 to 7 s a call on an
// aged store (bench/pgage).
//
// Each transaction deletes the messages of the queue rows it deleted, found
// by id (message_purge_freed.sql). Once the finished rows are all gone, the
// messages that never had one are found by a walk that goes on from where
// the last one stopped (message_purge_walk.sql): the walk from the oldest
// message past the cut-off went over every message whose rows were not all
// finished (a destination blocked for weeks: all its backlog) at every call.
func (s *Store) MessagePurge(ctx context.Context, p storage.MessagePurgeParams) (storage.PurgeResult, error) {
	older := storage.Seconds(p.OlderThan)
	res, err := storage.Purge(p.Limit, func(q int64, first bool) (storage.PurgeResult, error) {
		return s.purgeFinished(ctx, p.Fence, older, q, first)
	}, func(w int64) (deleted, passed int64, err error) {
		err = s.fenced(ctx, p.Fence, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, queries.Get("message_purge_walk"), older, w).Scan(&deleted, &passed)
		})
		return deleted, passed, err
	})
	return res, wrap("message purge", err)
}

// purgeFinished is one transaction of MessagePurge: at most q finished
// queue rows, the messages they leave with no queue row, and (first) the
// nodes not seen since the cut-off.
func (s *Store) purgeFinished(ctx context.Context, f storage.Fence, older float64, q int64, first bool) (storage.PurgeResult, error) {
	var res storage.PurgeResult
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		res = storage.PurgeResult{}
		rows, err := tx.Query(ctx, queries.Get("message_purge_queue"), older, q)
		if err != nil {
			return err
		}
		freed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		res.QueueRows = int64(len(freed))
		if len(freed) > 0 {
			tag, err := tx.Exec(ctx, queries.Get("message_purge_freed"), freed, older)
			if err != nil {
				return err
			}
			res.Messages = tag.RowsAffected()
		}
		if !first {
			return nil
		}
		tag, err := tx.Exec(ctx, queries.Get("node_purge"), older)
		if err != nil {
			return err
		}
		res.Nodes = tag.RowsAffected()
		return nil
	})
	return res, err
}

// QueueClaimNext implements storage.Store: fence, reclaim the stranded head,
// claim the head if it is pending and due; see queue_claim_next.sql. It is
// combined with other lanes' writes (lanebatch.go).
func (s *Store) QueueClaimNext(ctx context.Context, p storage.QueueClaimNextParams) (storage.QueueClaim, error) {
	w := &laneWrite{ctx: ctx, fence: p.Fence, lane: p.Lane, from: p.From, owner: p.Owner, ttl: p.LeaseTTL}
	s.lanes.do(w)
	switch {
	case w.err != nil:
		return storage.QueueClaim{}, wrap(fmt.Sprintf("queue claim from row %d", p.From), w.err)
	case w.next == nil:
		return storage.QueueClaim{}, storage.ErrNoWork
	}
	return *w.next, nil
}

// QueueAdvance implements storage.Store, combined with other lanes' writes
// (lanebatch.go).
func (s *Store) QueueAdvance(ctx context.Context, p storage.QueueAdvanceParams) (storage.QueueAdvanced, error) {
	c := p.Claim
	w := &laneWrite{ctx: ctx, fence: p.Fence, complete: &c, lane: p.Lane, ahead: p.Ahead, from: c.ID, owner: p.Owner, ttl: p.LeaseTTL}
	s.lanes.do(w)
	if w.err != nil {
		return storage.QueueAdvanced{}, wrap(fmt.Sprintf("queue advance of row %d attempt %d", c.ID, c.Attempt), w.err)
	}
	return storage.QueueAdvanced{Completed: w.completed, Next: w.next, Ahead: w.nextAhead}, nil
}

// QueueGiveBack implements storage.Store, combined with other lanes' writes
// (lanebatch.go).
func (s *Store) QueueGiveBack(ctx context.Context, p storage.QueueGiveBackParams) (int64, error) {
	if len(p.Claims) == 0 {
		return 0, nil
	}
	w := &laneWrite{ctx: ctx, fence: p.Fence, giveBack: p.Claims, noteError: p.Error, noteDetail: p.Detail, of: p.Lane}
	s.lanes.do(w)
	if w.err != nil {
		return 0, wrap(fmt.Sprintf("queue give back of %d rows", len(p.Claims)), w.err)
	}
	return w.givenBack, nil
}

// QueueReleaseOwn implements storage.Store: the fence and the statement in
// one round trip straight through the pool, not in the lanes' batches
// (lanebatch.go). A lane calls it only after a write whose outcome it never
// heard of, so it is rare and needs none of the batches' economy; alone, it
// also needs none of their handling of one write's failure (set aside, the
// rest run again). It is safe beside them: a lane has one write outstanding
// at a time, so no batch of this node's in flight holds this lane's rows; a row locked by
// another session makes it wait, as the lanes' retries and holds do
// (claimUpdate), and the lane waits with it (its other rows wait anyway).
func (s *Store) QueueReleaseOwn(ctx context.Context, p storage.QueueReleaseOwnParams) (int64, error) {
	var n int64
	err := s.fencedBatch(ctx, p.Fence, func(b *pgx.Batch) {
		b.Queue(queries.Get("queue_release_own"), p.Lane, p.Owner)
	}, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, wrap("queue release own", err) // not the lane: its key is often a patient id
	}
	return n, nil
}

// claimUpdate runs one of the statements that act on a current claim and
// tells ErrNotFound from ErrClaimLost when it matched nothing.
func (s *Store) claimUpdate(ctx context.Context, op string, f storage.Fence, c storage.Claim, args ...any) error {
	var matched bool
	err := s.fencedBatch(ctx, f, func(b *pgx.Batch) {
		b.Queue(queries.Get(op), append([]any{c.ID, c.Owner, c.Attempt}, args...)...)
	}, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		matched = tag.RowsAffected() == 1
		return err
	})
	if err == nil && !matched {
		// Nothing was written; which error it is needs no transaction: a
		// queue row is only ever deleted by the purge, long after its claim.
		err = missingOr(ctx, s.pool, c.ID, storage.ErrClaimLost)
	}
	return wrap(fmt.Sprintf("%s of queue row %d attempt %d", op, c.ID, c.Attempt), err)
}

// QueueComplete implements storage.Store, combined with other lanes' writes
// (lanebatch.go).
func (s *Store) QueueComplete(ctx context.Context, p storage.QueueCompleteParams) error {
	c := p.Claim
	w := &laneWrite{ctx: ctx, fence: p.Fence, complete: &c, of: p.Lane}
	s.lanes.do(w)
	err := w.err
	if err == nil && !w.completed {
		err = missingOr(ctx, s.pool, c.ID, storage.ErrClaimLost)
	}
	return wrap(fmt.Sprintf("queue complete of row %d attempt %d", c.ID, c.Attempt), err)
}

// QueueRetry implements storage.Store.
func (s *Store) QueueRetry(ctx context.Context, p storage.QueueRetryParams) error {
	return s.claimUpdate(ctx, "queue_retry", p.Fence, p.Claim, storage.Seconds(p.Delay), p.Error, p.Detail)
}

// QueueDead implements storage.Store.
func (s *Store) QueueDead(ctx context.Context, p storage.QueueDeadParams) error {
	return s.claimUpdate(ctx, "queue_dead", p.Fence, p.Claim, p.Error, p.Detail)
}

// QueueHold implements storage.Store.
func (s *Store) QueueHold(ctx context.Context, p storage.QueueHoldParams) error {
	return s.claimUpdate(ctx, "queue_hold", p.Fence, p.Claim, p.Error, p.Detail)
}

// QueueRelease implements storage.Store.
func (s *Store) QueueRelease(ctx context.Context, p storage.QueueReleaseParams) (storage.QueueActed, error) {
	return s.operatorUpdate(ctx, "queue_release", notPending, p.ID)
}

// QueueSkip implements storage.Store.
func (s *Store) QueueSkip(ctx context.Context, p storage.QueueSkipParams) (storage.QueueActed, error) {
	return s.operatorUpdate(ctx, "queue_skip", notSkipped, p.ID, p.Reason)
}

// operatorUpdate runs an operator action on a row and returns the row's
// message and destination (its statement's RETURNING), or, when it matched
// nothing, why as refused tells it (notPending, notSkipped). A change bumps
// the queue's version in the same transaction (storage.QueueVersionName).
func (s *Store) operatorUpdate(ctx context.Context, op string, refused func(context.Context, queryRower, int64) error, id int64, args ...any) (storage.QueueActed, error) {
	var acted storage.QueueActed
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, queries.Get(op), append([]any{id}, args...)...).Scan(&acted.MessageID, &acted.Destination)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return refused(ctx, tx, id)
		case err != nil:
			return err
		}
		_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
		return err
	})
	if errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrNotPending) || errors.Is(err, storage.ErrNotHead) {
		return storage.QueueActed{}, err
	}
	if err != nil {
		return storage.QueueActed{}, wrap(fmt.Sprintf("%s of queue row %d", op, id), err)
	}
	return acted, nil
}

// queryRower is a pool or a transaction.
type queryRower interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}

// missingOr says why an update of queue row id matched nothing: the row does
// not exist (ErrNotFound), or it is not in the state the update needs
// (otherwise).
func missingOr(ctx context.Context, q queryRower, id int64, otherwise error) error {
	if _, err := queueStatus(ctx, q, id); err != nil {
		return err
	}
	return otherwise
}

// notPending says why an operator action on queue row id matched nothing:
// the row does not exist (ErrNotFound), or it is not pending
// (storage.NotPending, with the status it has).
func notPending(ctx context.Context, q queryRower, id int64) error {
	status, err := queueStatus(ctx, q, id)
	if err != nil {
		return err
	}
	return storage.NotPending{ID: id, Status: status}
}

// notSkipped says why an operator's skip of queue row id matched nothing:
// the row does not exist (ErrNotFound), it is not pending (storage.NotPending,
// with the status it has), or a row of its lane is ahead of it
// (storage.NotHead, naming the lane's head). A pending row with none ahead
// any more was not the head as the skip ran and is now (or was in flight
// and was re-pended): a NotPending with its pending status, to try again.
func notSkipped(ctx context.Context, q queryRower, id int64) error {
	var status string
	var head *int64
	err := q.QueryRow(ctx, queries.Get("queue_skip_refused"), id).Scan(&status, &head)
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.ErrNotFound
	}
	if err != nil {
		return err
	}
	if head == nil {
		return storage.SkipRefused(id, status, 0, false)
	}
	return storage.SkipRefused(id, status, *head, true)
}

// queueStatus returns the status of queue row id, or ErrNotFound.
func queueStatus(ctx context.Context, q queryRower, id int64) (string, error) {
	var status string
	err := q.QueryRow(ctx, queries.Get("queue_status"), id).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", storage.ErrNotFound
	}
	return status, err
}

// QueueExtendLease implements storage.Store.
func (s *Store) QueueExtendLease(ctx context.Context, p storage.QueueExtendLeaseParams) error {
	return s.claimUpdate(ctx, "queue_extend_lease", p.Fence, p.Claim, storage.Seconds(p.TTL))
}

// QueueRecoverForeign implements storage.Store.
func (s *Store) QueueRecoverForeign(ctx context.Context, p storage.QueueRecoverForeignParams) (int64, error) {
	return s.repend(ctx, "queue_recover_foreign", p.Fence, p.Owner)
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
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, queries.Get(op), args...)
		if n = tag.RowsAffected(); err != nil || n == 0 {
			return err
		}
		_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
		return err
	})
	if err != nil {
		return 0, wrap(strings.ReplaceAll(op, "_", " "), err)
	}
	return n, nil
}

// QueueLanes implements storage.Store.
func (s *Store) QueueLanes(ctx context.Context, p storage.QueueLanesParams) ([]storage.LaneSummary, error) {
	if p.Limit <= 0 {
		return storage.AllLanes(ctx, s.QueueLanes)
	}
	rows, err := s.pool.Query(ctx, queries.Get("queue_lanes"), p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: queue lanes: %w", explain(err))
	}
	defer rows.Close()
	var out []storage.LaneSummary
	for rows.Next() {
		var l storage.LaneSummary
		var age float64
		dest := append([]any{&l.Lane, &l.Destination, &l.Depth}, queueRowDest(&l.Head)...)
		if err := rows.Scan(append(dest, &age, &l.Claimable, &l.Head.LastErrorDetail)...); err != nil {
			return nil, fmt.Errorf("postgres: queue lanes: %w", err)
		}
		l.HeadAge = time.Duration(age * float64(time.Second))
		out = append(out, l)
	}
	return out, rows.Err()
}

// QueueStats implements storage.Store.
func (s *Store) QueueStats(ctx context.Context) ([]storage.QueueStat, error) {
	rows, err := s.pool.Query(ctx, queries.Get("queue_stats"))
	if err != nil {
		return nil, fmt.Errorf("postgres: queue stats: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.QueueStat, error) {
		var st storage.QueueStat
		var oldest float64
		err := r.Scan(&st.Destination, &st.Status, &st.Count, &st.Held, &oldest)
		st.OldestAge = time.Duration(oldest * float64(time.Second))
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: queue stats: %w", err)
	}
	return out, nil
}

// QueueLaneKeys implements storage.Store.
func (s *Store) QueueLaneKeys(ctx context.Context) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, queries.Get("queue_lane_keys"))
	if err != nil {
		return nil, wrap("queue lane keys", err)
	}
	out := map[string]string{}
	var dest, key string
	_, err = pgx.ForEachRow(rows, []any{&dest, &key}, func() error {
		out[dest] = key
		return nil
	})
	if err != nil {
		return nil, wrap("queue lane keys", err)
	}
	return out, nil
}

// QueueLaneKeyRecord implements storage.Store.
func (s *Store) QueueLaneKeyRecord(ctx context.Context, p storage.QueueLaneKeyRecordParams) error {
	if len(p.LaneKey) > storage.MaxLaneKeyBytes {
		return fmt.Errorf("postgres: queue lane key record: %d bytes, at most %d", len(p.LaneKey), storage.MaxLaneKeyBytes)
	}
	err := s.fenced(ctx, p.Fence, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, queries.Get("queue_lane_key_record"), p.Destination, p.LaneKey)
		return err
	})
	return wrap("queue lane key record", err)
}

// QueueRelaneRead implements storage.Store.
func (s *Store) QueueRelaneRead(ctx context.Context, p storage.QueueRelaneReadParams) ([]storage.RelaneRow, error) {
	rows, err := s.pool.Query(ctx, queries.Get("queue_relane_read"), p.Destination, p.AfterLane, p.AfterID, p.Limit)
	if err != nil {
		return nil, wrap("queue relane read", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.RelaneRow, error) {
		var row storage.RelaneRow
		err := r.Scan(&row.ID, &row.Lane, &row.Inbound, &row.Payload)
		return row, err
	})
	if err != nil {
		return nil, wrap("queue relane read", err)
	}
	return out, nil
}

// QueueRelane implements storage.Store.
func (s *Store) QueueRelane(ctx context.Context, p storage.QueueRelaneParams) (int64, error) {
	ids := make([]int64, len(p.Moves))
	lanes := make([]string, len(p.Moves))
	for i, m := range p.Moves {
		ids[i], lanes[i] = m.ID, m.Lane
	}
	var n int64
	err := s.fenced(ctx, p.Fence, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, queries.Get("queue_relane"), ids, lanes)
		n = tag.RowsAffected()
		return err
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
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var made bool
		if err := tx.QueryRow(ctx, queries.Get("outbound_hold"), p.Outbound).Scan(&h.Since, &made); err != nil {
			return err
		}
		if made {
			_, err := bumpVersion(ctx, tx, storage.QueueVersionName)
			return err
		}
		return nil
	})
	if err != nil {
		return storage.OutboundHeld{}, wrap("outbound hold", err)
	}
	return h, nil
}

// OutboundRelease implements storage.Store.
func (s *Store) OutboundRelease(ctx context.Context, p storage.OutboundReleaseParams) (bool, error) {
	var released bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, queries.Get("outbound_release"), p.Outbound)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		released = true
		_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
		return err
	})
	if err != nil {
		return false, wrap("outbound release", err)
	}
	return released, nil
}

// OutboundHolds implements storage.Store.
func (s *Store) OutboundHolds(ctx context.Context) ([]storage.OutboundHeld, error) {
	rows, err := s.pool.Query(ctx, queries.Get("outbound_holds"))
	if err != nil {
		return nil, wrap("outbound holds", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.OutboundHeld, error) {
		var h storage.OutboundHeld
		err := r.Scan(&h.Outbound, &h.Since)
		return h, err
	})
	if err != nil {
		return nil, wrap("outbound holds", err)
	}
	return out, nil
}

// ConfigVersionBump implements storage.Store.
func (s *Store) ConfigVersionBump(ctx context.Context, p storage.ConfigVersionBumpParams) (int64, error) {
	v, err := bumpVersion(ctx, s.pool, storage.ConfigName(p.Name))
	if err != nil {
		return 0, fmt.Errorf("postgres: config version bump: %w", explain(err))
	}
	return v, nil
}

// bumpVersion increments the version named name and returns it, on its own
// or inside a transaction: the queue's version (storage.QueueVersionName)
// moves in the transaction of the change it tells of.
func bumpVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, name string) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, queries.Get("config_version_bump"), name).Scan(&v)
	return v, err
}

// ConfigVersionRead implements storage.Store.
func (s *Store) ConfigVersionRead(ctx context.Context, p storage.ConfigVersionReadParams) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, queries.Get("config_version_read"), storage.ConfigName(p.Name)).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: config version read: %w", explain(err))
	}
	return v, nil
}

// Secret implements storage.Store: an insert that does nothing when the name
// has a value, then a read of whichever value stands. Two statements, each
// its own transaction: the read's snapshot is taken after the insert (or
// the concurrent one it waited for) committed.
func (s *Store) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	if err := storage.CheckSecret(name, fresh); err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, queries.Get("secret_insert"), name, fresh); err != nil {
		return nil, fmt.Errorf("postgres: secret %q insert: %w", name, err)
	}
	var v []byte
	if err := s.pool.QueryRow(ctx, queries.Get("secret_read"), name).Scan(&v); err != nil {
		return nil, fmt.Errorf("postgres: secret %q read: %w", name, err)
	}
	return v, nil
}

// wrap adds the dialect and operation to an error, keeping the shared
// sentinels matchable with errors.Is, and marks a full disk (disk_full)
// storage.ErrFull: the operator must hear where to free space.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "53100" { // disk_full: "could not extend file"
		return fmt.Errorf("postgres: %s: %w: free disk space on the database server (%w)", op, storage.ErrFull, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, explain(err))
}

// Autovacuum says whether PostgreSQL removes the dead row versions of mf's
// tables by itself.
type Autovacuum struct {
	// Server is false when the server's autovacuum (or track_counts, which
	// it needs) is off.
	Server bool
	// Disabled lists mf's tables that turned autovacuum off for themselves
	// (autovacuum_enabled = off).
	Disabled []string
}

// Autovacuum reads whether PostgreSQL vacuums mf_queue and mf_messages by
// itself. Each delivery updates its queue row twice and the purge deletes,
// so without vacuum the table and its indexes only grow and every claim
// walks further; mf run warns about it at start.
func (s *Store) Autovacuum(ctx context.Context) (Autovacuum, error) {
	var a Autovacuum
	if err := s.pool.QueryRow(ctx, queries.Get("autovacuum_state")).Scan(&a.Server, &a.Disabled); err != nil {
		return a, fmt.Errorf("postgres: read the autovacuum settings: %w", err)
	}
	return a, nil
}

// Package sqlite is the SQLite dialect of storage.Store, on modernc.org/sqlite
// (pure Go, no cgo) through database/sql. Its SQL lives in the embedded sql/
// and migrations/ files.
//
// It is single-node only (Clusterable is false): SQLite is a file on one
// machine's disk, and the WAL journal that lets readers run beside the writer
// relies on shared memory that only processes of one host can map. Every
// connection runs with journal_mode=WAL and synchronous=FULL, so a committed
// ingest (and so an ACK) survives power loss, and with foreign keys on.
//
// Every write is one BEGIN IMMEDIATE transaction: it takes SQLite's single
// write lock before reading anything, so writers never deadlock upgrading a
// read lock, and several handles on one file (or processes) queue on the lock
// for up to the busy timeout. That single writer is also what gives the lane
// claim and ingest the ordering PostgreSQL gets from row and advisory locks;
// see sql/queue_claim_next.sql.
//
// Times are stored as INTEGER Unix milliseconds computed in SQL from SQLite's
// own clock, and returned as UTC time.Time.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/storage"
)

//go:embed sql/*.sql
var sqlFS embed.FS

//go:embed migrations/*.sql
var migrationsFS embed.FS

var queries = storage.MustLoadQueries(sqlFS, "sql")

// Defaults of Options.
const (
	DefaultPoolSize    = 5
	DefaultBusyTimeout = 10 * time.Second
)

// Options configure Open.
type Options struct {
	// Path is the database file, created if missing. An in-memory database
	// is refused: it has no WAL and each connection would see its own.
	Path string
	// PoolSize is the maximum number of open connections (default 5). Reads
	// run in parallel on them; writes take turns on SQLite's single writer.
	// One deadlocks: a write holds it while a read waits for another (config
	// refuses pool_size below 2).
	PoolSize int
	// BusyTimeout is how long a write waits for another handle or process
	// to release the write lock before failing with SQLITE_BUSY (default
	// 10s).
	BusyTimeout time.Duration
	// Exclusive takes a lock on PATH.lock for as long as the store is open,
	// and fails if another process holds it: the engine sets it, so that
	// two engines never run on one file. Tools and tests that open several
	// handles in one process leave it off.
	Exclusive bool
	// Log receives what the store does on its own (background checkpoints).
	// The zero value logs nothing.
	Log zerolog.Logger
}

// Store is the SQLite storage.Store.
type Store struct {
	db *sql.DB
	// writer is taken by every write transaction of this handle. SQLite
	// admits one writer at a time anyway; queuing here first, on a channel
	// that honours the context, spares the pool's connections from polling
	// the file lock through the busy handler's sleeps. Other handles and
	// processes still meet at the file lock.
	writer chan struct{}
	lock   *processLock

	mu      sync.Mutex  // guards queue and closed
	queue   []*writeJob // writes waiting for the next group commit
	closed  bool        // Close has begun: no write is queued any more
	stmtsMu sync.Mutex
	stmts   map[string]*sql.Stmt // see prepared

	// damaged holds the first error that found the file damaged (see
	// damage); nil while none has.
	damaged atomic.Pointer[error]
	// readOnly holds the error of the last write that found the store
	// read-only (see full), for Ping; nil while none has, or since a write
	// was committed.
	readOnly atomic.Pointer[error]

	// commits counts the write transactions committed (a test observes the
	// grouping with it).
	commits atomic.Int64

	// The background checkpoints (checkpoint.go).
	log             zerolog.Logger
	path            string
	busyTimeout     time.Duration
	stopCheckpoints chan struct{}
	closing         sync.Once
	checkpointsDone chan struct{}
}

var _ storage.Store = (*Store)(nil)

// Open opens (creating if missing) the database file, and checks on a first
// connection that the settings every connection is given (WAL,
// synchronous=FULL, foreign keys, the busy timeout) took effect. It does not
// migrate: call Migrate.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Path == "" || o.Path == ":memory:" {
		return nil, fmt.Errorf("sqlite: store path %q: a database file is required", o.Path)
	}
	if o.PoolSize <= 0 {
		o.PoolSize = DefaultPoolSize
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	var lock *processLock
	if o.Exclusive {
		l, err := lockFile(o.Path)
		if err != nil {
			return nil, err
		}
		lock = l
		if err := refuseHardLinks(o.Path); err != nil {
			lock.release()
			return nil, err
		}
	}
	if err := createPrivate(o.Path, o.Log); err != nil {
		lock.release()
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn(o))
	if err != nil {
		lock.release()
		return nil, fmt.Errorf("sqlite: open %s: %w", o.Path, err)
	}
	db.SetMaxOpenConns(o.PoolSize)
	// Keep every connection: each has its own page cache and pragmas.
	db.SetMaxIdleConns(o.PoolSize)
	s := &Store{db: db, writer: make(chan struct{}, 1), lock: lock, stmts: map[string]*sql.Stmt{},
		log: o.Log, path: o.Path, busyTimeout: o.BusyTimeout,
		stopCheckpoints: make(chan struct{}), checkpointsDone: make(chan struct{})}
	go s.checkpointLoop()
	if err := s.checkPragmas(ctx, o.BusyTimeout); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// refuseHardLinks refuses a database file that has another name besides
// path. SQLite names its -wal and -shm files after the path it opened, and
// the process lock is PATH.lock: an engine on each name had a lock and a
// write-ahead log of its own on one file, ran beside the other (each
// delivering every lane) and corrupted it. SQLite itself only logs this.
func refuseHardLinks(path string) error {
	real := realPath(path)
	n, err := linkCount(real)
	if err != nil || n <= 1 {
		return nil // a missing file is created below; others fail there
	}
	return fmt.Errorf("sqlite: %s has %d names (hard links): SQLite keeps its write-ahead log beside the name it opens, so an engine on another name would run beside this one and corrupt the file; remove the other names (find / -samefile %s) or give one engine a copy", path, n, real)
}

// dbFileMode is the mode of a database file the store creates: it holds
// every message received (PHI). SQLite would create it 0644 less the umask,
// readable by every local user under the usual umask 022; it gives its -wal
// and -shm files the database file's mode.
const dbFileMode = 0o600

// createPrivate creates the database file, empty (which SQLite takes for an
// empty database), with dbFileMode if it does not exist. An existing file
// keeps the mode its operator gave it; one that others can read is logged,
// and one this process cannot write is refused.
func createPrivate(path string, log zerolog.Logger) error {
	// O_EXCL fails on a symbolic link, even one that leads nowhere yet:
	// create the file it leads to, or SQLite creates it 0644.
	f, err := os.OpenFile(realPath(path), os.O_RDWR|os.O_CREATE|os.O_EXCL, dbFileMode)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("sqlite: %s is a directory: the store's path names its database file (created if missing)", path)
	}
	// SQLite opens a file it cannot write read-only, without a word, and
	// every write then fails: the engine would start, bind its ports and
	// answer every message AE. The -wal and -shm files a crash left behind
	// (made by another user, say) are written too.
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(name); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := canWrite(name); err != nil {
			return fmt.Errorf("sqlite: %s cannot be written (%w): mf stores every message it accepts there; give the user mf runs as write access to it (chown or chmod it, or move it off a read-only file system)", name, err)
		}
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o007 != 0 {
		log.Warn().Str("path", path).Str("mode", fi.Mode().Perm().String()).
			Msg("the SQLite store is readable by every local user, and it holds every message received: chmod o-rwx it (its -wal and -shm files take its mode)")
	}
	return nil
}

// dsn builds modernc's URI filename. The driver applies the _pragma list to
// every new connection (busy_timeout first), and _txlock makes every
// read-write transaction BEGIN IMMEDIATE.
func dsn(o Options) string {
	// In a URI filename '?' and '#' end the path and '%' escapes: keep them
	// literal.
	path := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(o.Path)
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	// The store checkpoints in the background instead (checkpoint.go).
	q.Add("_pragma", "wal_autocheckpoint(0)")
	// A long read pins the WAL, which grows by everything written beside
	// it; without a limit SQLite reuses the -wal file from its beginning
	// once the read ends and keeps its largest size on disk.
	q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// checkPragmas refuses a database that silently kept weaker settings.
func (s *Store) checkPragmas(ctx context.Context, busyTimeout time.Duration) error {
	var journal string
	var synchronous, foreignKeys, busyMS int64
	err := s.db.QueryRowContext(ctx, queries.Get("pragma_check")).Scan(&journal, &synchronous, &foreignKeys, &busyMS)
	var e *sqlite.Error
	switch {
	case err == nil:
	case errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_NOTADB:
		return fmt.Errorf("sqlite: %s is not a SQLite database (%w): mf leaves it as it is; point the store's path at mf's database, or move this file aside for mf to start an empty one there", s.path, err)
	case errors.As(err, &e) && (e.Code()&0xff == sqlite3.SQLITE_CANTOPEN || e.Code() == sqlite3.SQLITE_READONLY_DIRECTORY):
		return fmt.Errorf("sqlite: open %s: %w (its directory must exist and be writable: SQLite makes the -wal and -shm files beside it)", s.path, err)
	default:
		return fmt.Errorf("sqlite: open %s: %w", s.path, s.full(err))
	}
	// synchronous 2 is FULL.
	if !strings.EqualFold(journal, "wal") || synchronous != 2 || foreignKeys != 1 || busyMS != busyTimeout.Milliseconds() {
		return fmt.Errorf("sqlite: the database refused the required settings: journal_mode=%s synchronous=%d foreign_keys=%d busy_timeout=%d, want wal, 2 (FULL), 1, %d (is the file on a local disk?)",
			journal, synchronous, foreignKeys, busyMS, busyTimeout.Milliseconds())
	}
	return nil
}

// DB exposes the database for tests and diagnostics. Writes made through it
// bypass the fence.
func (s *Store) DB() *sql.DB { return s.db }

// Dialect implements storage.Store.
func (s *Store) Dialect() string { return "sqlite" }

// Clusterable implements storage.Store: SQLite is single-node only.
func (s *Store) Clusterable() bool { return false }

// ClaimAhead implements storage.Store: 0. SQLite's statements are calls in
// this process, and its run claim (queue_claim_run.sql, window functions over
// the lane's next rows) cost more than the head claims it saves: bench/run's
// 32-connection load delivered 10,078 and 10,149 messages/s with runs of 8
// against 11,204 and 10,908 without (two A/B pairs).
func (s *Store) ClaimAhead() int { return 0 }

// errClosed is the error of a write after Close.
var errClosed = errors.New("sqlite: the store is closed")

// closeGrace is how much longer than the busy timeout Close waits for the
// group commit running (a variable: tests shorten it).
var closeGrace = 5 * time.Second

// Close implements storage.Store. It refuses new writes, waits for the
// group commit running (up to the busy timeout and closeGrace) and keeps
// the writer token, fails the writes still queued, and only then closes
// the database and releases the process lock: database/sql's Close does
// not wait for connections in use, so the lock went while this process's
// last transaction still committed, and another engine could take the
// file under it.
func (s *Store) Close() error {
	s.closing.Do(func() { close(s.stopCheckpoints) })
	<-s.checkpointsDone
	s.mu.Lock()
	again := s.closed
	s.closed = true
	s.mu.Unlock()
	if !again {
		wait := time.NewTimer(s.busyTimeout + closeGrace)
		select {
		case s.writer <- struct{}{}: // kept: nothing is written after this
		case <-wait.C:
			s.log.Error().Str("path", s.path).Dur("waited", s.busyTimeout+closeGrace).
				Msg("closing the SQLite store: a write transaction is still running; closing without it (it may fail, or commit after the process lock is released)")
		}
		wait.Stop()
	}
	s.mu.Lock()
	queued := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, j := range queued {
		j.done <- errClosed
	}
	s.stmtsMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = map[string]*sql.Stmt{}
	s.stmtsMu.Unlock()
	err := s.db.Close()
	s.lock.release()
	return err
}

// Ping implements storage.Store.
func (s *Store) Ping(ctx context.Context) error {
	if found := s.damaged.Load(); found != nil {
		return s.damagedError(*found)
	}
	// Its SELECT succeeds on a store that takes no writes: that is known
	// only from the writes.
	if found := s.readOnly.Load(); found != nil {
		return fmt.Errorf("sqlite: ping: %w", *found)
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, queries.Get("ping")).Scan(&n); err != nil {
		return fmt.Errorf("sqlite: ping (is the store migrated?): %w", err)
	}
	if n != 1 {
		return fmt.Errorf("sqlite: ping: %d leader lease rows, want 1", n)
	}
	return nil
}

// write runs fn as its own unit of a write transaction: all of fn's
// statements or none of them, durable once write returns nil.
//
// Writes are group-committed. SQLite has one writer and pays a full fsync
// per commit, so with many lanes delivering at once, one transaction per
// claim and per completion would make the disk's commit rate the engine's
// delivery rate. Instead, writes that queue while a transaction is being
// committed go together into the next one (flat combining: whichever caller
// takes the writer token runs the whole queue), and one write's failure
// rolls back that write alone (see commit). No caller hears of success
// before the COMMIT that makes its write durable; if the COMMIT fails,
// every write of the batch fails with it.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.run(&writeJob{ctx: ctx, fn: fn, done: make(chan error, 1)})
}

// run queues j for the next group commit and returns its outcome.
func (s *Store) run(j *writeJob) error {
	if found := s.damaged.Load(); found != nil {
		return s.damagedError(*found)
	}
	ctx := j.ctx
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	s.queue = append(s.queue, j)
	s.mu.Unlock()
	for {
		select {
		case err := <-j.done:
			return j.outcome(err)
		case s.writer <- struct{}{}:
			s.combineFor(j)
			select { // ours was most likely in that batch: done, not another round
			case err := <-j.done:
				return j.outcome(err)
			default:
			}
		case <-ctx.Done():
			if s.withdraw(j) {
				return ctx.Err()
			}
			return j.outcome(<-j.done) // a batch has it: its outcome is the truth
		}
	}
}

// withdraw takes j out of the queue if no batch has taken it yet, and
// reports whether it did.
func (s *Store) withdraw(j *writeJob) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.queue {
		if q == j {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			return true
		}
	}
	return false
}

// combineFor runs combine for j's caller. If the group commit panics (its
// batch is answered, see combine), j, when the batch did not hold it (more
// writes were queued than a batch takes), is withdrawn before the panic
// goes on up j's goroutine: left queued with no one waiting for it, the
// next batch committed it, a message stored whose sender got no AA.
func (s *Store) combineFor(j *writeJob) {
	defer func() {
		if r := recover(); r != nil {
			s.withdraw(j)
			panic(r)
		}
	}()
	s.combine()
}

// combine commits the next batch of the queue, as the holder of the writer
// token, and gives the token back however it ends: a token kept by a panic
// (recovered upstream, by net/http or the actor system) left every later
// write of the process waiting for it until its context expired.
func (s *Store) combine() {
	var batch []*writeJob
	defer func() {
		if r := recover(); r != nil {
			// Not a write's function (commitBatch recovers those): the
			// group commit itself. The writes it took are answered, or
			// their callers would wait for ever; one already answered
			// has a full buffer, or has gone.
			failed := fmt.Errorf("sqlite: the group commit failed: panic: %v", r)
			for _, j := range batch {
				select {
				case j.done <- failed:
				default:
				}
			}
			<-s.writer
			panic(r)
		}
		<-s.writer
	}()
	s.mu.Lock()
	n := min(len(s.queue), maxWriteBatch)
	batch = s.queue[:n:n]
	s.queue = s.queue[n:]
	s.mu.Unlock()
	if len(batch) > 0 {
		s.commit(batch)
	}
}

// writeJob is one caller's write waiting for a group commit.
type writeJob struct {
	ctx context.Context
	// fence, if set, must be current for fn to run (see fenced).
	fence *storage.Fence
	fn    func(tx *sql.Tx) error
	done  chan error
	// panicked is set, before done is answered, if fn panicked: fn does
	// not run again, and its caller panics with it (outcome).
	panicked *WritePanic
}

// WritePanic is what a write's caller panics with when the write's
// function panicked. Whichever caller holds the writer token runs every
// queued write's function on its own goroutine (flat combining), so a
// panic there is recovered, rolls back that write alone (the others of
// the batch are committed), and is raised again on the goroutine of the
// write's own caller: as a PostgreSQL store would, which runs the function
// on the caller's goroutine. Value is what the function panicked with,
// Stack where (the goroutine that ran it).
type WritePanic struct {
	Value any
	Stack []byte
}

// Error says what the function panicked with, and where.
func (p *WritePanic) Error() string {
	return fmt.Sprintf("sqlite: a write's function panicked: %v (recovered in the group commit, and panicked again on its caller's goroutine)\n\n%s", p.Value, p.Stack)
}

// call runs j's function in tx, turning a panic into j's failure.
func (j *writeJob) call(tx *sql.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			j.panicked = &WritePanic{Value: r, Stack: debug.Stack()}
			err = j.panicked
		}
	}()
	return j.fn(tx)
}

// outcome returns err, the answer to j, or panics on the caller's
// goroutine if j's function panicked.
func (j *writeJob) outcome(err error) error {
	if j.panicked != nil {
		panic(j.panicked)
	}
	return err
}

// maxWriteBatch bounds the writes of one transaction, so that a long queue
// does not make one transaction (and its callers' wait) arbitrarily long.
const maxWriteBatch = 256

// commit runs batch in one BEGIN IMMEDIATE transaction and tells each
// caller its outcome after the COMMIT (a fenced write runs only after the
// check of its fence: see fenced).
//
// A write that fails must roll back alone, so each write could run in a
// savepoint of its own; but two more statements per write were 8% of the
// writer's time under load (pprof), and writes almost never fail. So the
// batch runs first without savepoints; only if a write fails is that
// attempt rolled back whole and the batch run again with a savepoint per
// write. A write that found nothing to do (a claim with no claimable head,
// a lost claim) says so with unchanged: it wrote nothing, so the batch
// needs no second attempt for it.
func (s *Store) commit(batch []*writeJob) {
	if !s.commitBatch(batch, false) {
		s.commitBatch(batch, true)
	}
}

// unchanged wraps the error of a write that changed nothing: an outcome for
// its caller, not a failure that the group commit must roll back.
type unchanged struct{ error }

func (u unchanged) Unwrap() error { return u.error }

// commitBatch makes one attempt at committing batch, each write in a
// savepoint of its own if savepoints is set. Without savepoints, it rolls
// back and returns false, telling no caller anything, as soon as a write
// fails. With them, a write whose failure took the whole transaction with
// it fails alone, and the others are committed in another attempt.
func (s *Store) commitBatch(batch []*writeJob, savepoints bool) bool {
	fail := func(err error) {
		err = s.full(err)
		for _, j := range batch {
			j.done <- err
		}
	}
	// The transaction serves several callers: none of their contexts may
	// cancel it (an interrupted statement would roll back the others'
	// writes). Each write still checks its own context before it starts.
	ctx := context.WithoutCancel(batch[0].ctx)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		fail(fmt.Errorf("begin immediate: %w", err))
		return true
	}
	// A panic out of here (not a write's: call recovers those) must not
	// leave the transaction open, holding SQLite's write lock for good.
	defer tx.Rollback() //nolint:errcheck // ErrTxDone once committed or rolled back
	results := make([]error, len(batch))
	// current is the fence last found current in this transaction, or nil.
	var current *storage.Fence
	for i, j := range batch {
		if j.panicked != nil { // in an attempt before this one: not again
			results[i] = j.panicked
			continue
		}
		if err := j.ctx.Err(); err != nil {
			results[i] = err
			continue
		}
		if j.fence == nil {
			current = nil // an unfenced write may change the lease row
		} else if current == nil || *current != *j.fence {
			err := s.checkFence(ctx, tx, *j.fence)
			if errors.Is(err, storage.ErrFenced) {
				results[i], current = err, nil
				continue
			}
			if err != nil { // outside any write: nothing of the batch is trusted
				_ = tx.Rollback()
				fail(err)
				return true
			}
			current = j.fence
		}
		if savepoints {
			if err := s.execPrepared(ctx, tx, "SAVEPOINT w"); err != nil {
				_ = tx.Rollback()
				fail(fmt.Errorf("savepoint: %w", err))
				return true
			}
		}
		results[i] = j.call(tx)
		var u unchanged
		if errors.As(results[i], &u) {
			results[i] = u.error // it wrote nothing: nothing to roll back
		} else if results[i] != nil {
			if !savepoints {
				_ = tx.Rollback()
				return false
			}
			if err := s.execPrepared(ctx, tx, "ROLLBACK TO w"); err != nil {
				// SQLite rolled the whole transaction back, as it may on
				// SQLITE_FULL, IOERR, BUSY or NOMEM within a statement (a
				// full disk met while the page cache spills, the file at
				// max_page_count): this write fails with its own error,
				// and the others do not fail with it. The writes before it
				// worked: they are committed in an attempt of their own,
				// then those after it in another, in their order; so each
				// write runs a bounded number of times however many fail
				// (re-running all the others after each failure was
				// quadratic). A full disk is met more often at COMMIT,
				// which fails the whole batch (below).
				_ = tx.Rollback()
				if i > 0 {
					s.commitBatch(batch[:i:i], true)
				}
				j.done <- s.full(results[i])
				if i+1 < len(batch) {
					s.commitBatch(batch[i+1:], true)
				}
				return true
			}
		}
		if savepoints {
			if err := s.execPrepared(ctx, tx, "RELEASE w"); err != nil {
				_ = tx.Rollback()
				fail(fmt.Errorf("release savepoint: %w", err))
				return true
			}
		}
	}
	if err := tx.Commit(); err != nil {
		fail(fmt.Errorf("commit: %w", err))
		return true
	}
	s.commits.Add(1)
	if s.readOnly.Load() != nil {
		s.readOnly.Store(nil) // writable again
	}
	for i, j := range batch {
		j.done <- s.full(results[i])
	}
	return true
}

// full returns err marked storage.ErrFull, saying where to free space, when
// the disk is full: SQLite's SQLITE_FULL (or the file has reached
// max_page_count), or an I/O error of a write on a file system with less
// than fullBelow bytes free. SQLite reports ENOSPC as SQLITE_FULL only for
// the pages it writes: growing the -shm file (at open, and by the first
// reader of a new WAL), a size hint or an fsync that meet the full disk
// say "disk I/O error (4874)" and the like, which sends an operator to
// check the disk's health. It returns err marked storage.ErrReadOnly, and
// remembered for Ping, when the store takes no writes (readOnly). Else it
// returns err (see damage).
func (s *Store) full(err error) error {
	switch {
	case err == nil || errors.Is(err, storage.ErrFull) || errors.Is(err, storage.ErrReadOnly):
		return err
	case readOnly(err, s.path):
		err = fmt.Errorf("%w: %s takes no writes (SQLite: %w): its file system is read-only (the kernel remounts one so after an I/O error: see dmesg) or the file was made read-only or moved; mf stores nothing until it can write there again", storage.ErrReadOnly, s.path, err)
		if s.readOnly.Swap(&err) == nil {
			s.log.Error().Err(err).Str("path", s.path).Msg("the SQLite store takes no writes: senders are answered AE and keep their messages, and mf reports not ready until a write succeeds; make its file system writable (check the disk), then restart mf if it does not recover")
		}
		return err
	case diskFull(err, s.path):
		return fmt.Errorf("%w: free disk space on the file system of %s (SQLite: %w)", storage.ErrFull, s.path, err)
	}
	return s.damage(err)
}

// readOnly reports whether err, from the store at path, says that it takes
// no writes: SQLITE_READONLY and its extended codes (a connection opened
// while the file could not be written, the file moved), or an I/O error
// while its file system is read-only. A file system remounted read-only
// under open files (ext4's errors=remount-ro) fails their writes with
// EROFS, which SQLite reports as "disk I/O error (778)" (IOERR_WRITE) and
// the like, not as SQLITE_READONLY.
func readOnly(err error, path string) bool {
	var e interface{ Code() int }
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() & 0xff {
	case sqlite3.SQLITE_READONLY:
		return true
	case sqlite3.SQLITE_IOERR:
		return readOnlyFS(path)
	}
	return false
}

// damage marks the store damaged if err is SQLite's finding that its file
// is (SQLITE_CORRUPT, SQLITE_NOTADB), and returns err as damagedError
// says it then; else it returns err. A damaged file does not mend: writing
// on into it would store acknowledged messages where SQLite already found
// pages it cannot read (a backup copied over a crashed store's mf.db, the
// stale -wal beside it applied to it, did that: AA to every message while
// every listing of the lanes failed). So from then on every write is
// refused (an ingest answers AE, and its sender keeps the message) and
// Ping fails, which makes the node not ready.
func (s *Store) damage(err error) error {
	var e interface{ Code() int }
	if err == nil || errors.Is(err, storage.ErrDamaged) || !errors.As(err, &e) ||
		e.Code()&0xff != sqlite3.SQLITE_CORRUPT && e.Code()&0xff != sqlite3.SQLITE_NOTADB {
		return err
	}
	if s.damaged.CompareAndSwap(nil, &err) {
		s.log.Error().Err(err).Str("path", s.path).Msg("the SQLite store's file is damaged: mf stores nothing more in it (senders are answered AE and keep their messages) and reports not ready; stop mf run, then put the latest backup in its place with mf restore, or salvage it with sqlite3's .recover into a new file")
	}
	return s.damagedError(err)
}

// damagedError is the error of any write once the store is damaged: what
// SQLite found first, and what to do.
func (s *Store) damagedError(found error) error {
	return fmt.Errorf("%w: %s (%w): stop mf run, then mf restore --from the latest backup, or salvage it with sqlite3's .recover", storage.ErrDamaged, s.path, found)
}

// fullBelow is the free space under which a write's I/O error is taken for
// the full disk: SQLite grows the -shm file by 32 KiB, and the WAL and the
// database by pages of 4 KiB.
const fullBelow = 1 << 20

// freeSpace returns the bytes this process may still write on the file
// system of dir, and whether it could tell (a variable: tests stand in
// for a full disk).
var freeSpace = dirFreeSpace

// diskFull reports whether err, from the store at path, is the full disk.
func diskFull(err error, path string) bool {
	// An interface, not *sqlite.Error: the driver's errors cannot be made
	// outside it, and a test makes one of each code.
	var e interface{ Code() int }
	if !errors.As(err, &e) {
		return false
	}
	switch c := e.Code(); {
	case c&0xff == sqlite3.SQLITE_FULL:
		return true
	case c == sqlite3.SQLITE_IOERR_WRITE, c == sqlite3.SQLITE_IOERR_FSYNC, c == sqlite3.SQLITE_IOERR_DIR_FSYNC,
		c == sqlite3.SQLITE_IOERR_TRUNCATE, c == sqlite3.SQLITE_IOERR_SHMSIZE, c == sqlite3.SQLITE_IOERR_SHMMAP:
		free, ok := freeSpace(filepath.Dir(path))
		return ok && free < fullBelow
	}
	return false
}

// prepared returns tx's handle on a statement prepared once per connection
// and kept: the hot writes (fence, claim, completion, ingest, savepoints)
// run thousands of times a second, and re-parsing their SQL each time was
// over a third of the engine's CPU under load (pprof).
func (s *Store) prepared(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	s.stmtsMu.Lock()
	st, ok := s.stmts[query]
	s.stmtsMu.Unlock()
	if !ok {
		var err error
		if st, err = s.db.PrepareContext(ctx, query); err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
		s.stmtsMu.Lock()
		if prev, raced := s.stmts[query]; raced {
			st.Close()
			st = prev
		} else {
			s.stmts[query] = st
		}
		s.stmtsMu.Unlock()
	}
	return tx.StmtContext(ctx, st), nil
}

// execPrepared runs a prepared statement that returns nothing in tx.
func (s *Store) execPrepared(ctx context.Context, tx *sql.Tx, query string) error {
	st, err := s.prepared(ctx, tx, query)
	if err == nil {
		_, err = st.ExecContext(ctx)
	}
	return err
}

// read runs fn in a read transaction: one consistent WAL snapshot, which
// never waits for the writer.
func (s *Store) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a read has nothing to commit
	return fn(tx)
}

// SchemaCheck implements storage.Store.
func (s *Store) SchemaCheck(ctx context.Context) error {
	migrations, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	done, err := storage.AppliedMigrations(ctx, s.db, queries.Get("migrate_applied"))
	if err != nil {
		return s.wrap("schema check", err)
	}
	return storage.CheckSchema(migrations, done)
}

// Migrate implements storage.Store: every pending migration in one BEGIN
// IMMEDIATE transaction, whose write lock is the migration lock (SQLite DDL
// is transactional, so a failed migration leaves nothing behind).
func (s *Store) Migrate(ctx context.Context) error {
	migrations, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, queries.Get("migrate_table")); err != nil {
			return fmt.Errorf("create mf_schema_migrations: %w", err)
		}
		done, err := storage.AppliedMigrations(ctx, tx, queries.Get("migrate_applied"))
		if err != nil {
			return err
		}
		if err := storage.CheckApplied(migrations, done); err != nil {
			return err
		}
		for _, m := range migrations {
			if done[m.Version] {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, queries.Get("migrate_record"), m.Version, m.Name); err != nil {
				return fmt.Errorf("record migration %s: %w", m.Name, err)
			}
		}
		return nil
	})
	return s.wrap("migrate", err)
}

// fenced runs fn as a write (see write) only if the fence f is current:
// otherwise the write fails with ErrFenced and fn does not run. The
// transaction holds SQLite's write lock throughout, so no election can
// commit between the check and fn's statements.
//
// One check serves a run of writes with the same fence in a group commit
// (commit keeps the fence it last found current): within the transaction
// the lease row changes only through an unfenced write (the lease
// statements; no fenced write touches mf_leader_lease), and commit forgets
// the checked fence at every unfenced write. Under load a group commit holds
// a dozen or more lane writes; checking each one's fence was about 8% of the
// writer's time.
func (s *Store) fenced(ctx context.Context, f storage.Fence, fn func(tx *sql.Tx) error) error {
	return s.run(&writeJob{ctx: ctx, fence: &f, fn: fn, done: make(chan error, 1)})
}

// checkFence runs fence.sql in tx: nil if f is the current lease, ErrFenced
// if it is not.
func (s *Store) checkFence(ctx context.Context, tx *sql.Tx, f storage.Fence) error {
	var one int
	fence, err := s.prepared(ctx, tx, queries.Get("fence"))
	if err != nil {
		return err
	}
	err = fence.QueryRowContext(ctx, f.Owner, f.Term).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return storage.ErrFenced
	}
	if err != nil {
		return fmt.Errorf("fence check: %w", err)
	}
	return nil
}

// millis is a duration as the whole milliseconds the SQL files take: the
// precision of SQLite's clock.
func millis(d time.Duration) int64 { return d.Round(time.Millisecond).Milliseconds() }

// msTime scans an INTEGER Unix-milliseconds column into a UTC time.Time.
type msTime struct{ t *time.Time }

func (m msTime) Scan(src any) error {
	v, ok := src.(int64)
	if !ok {
		return fmt.Errorf("sqlite: time column holds %T, want INTEGER milliseconds", src)
	}
	*m.t = time.UnixMilli(v).UTC()
	return nil
}

// nullMsTime is msTime for a nullable column: NULL scans to a nil pointer.
type nullMsTime struct{ t **time.Time }

func (m nullMsTime) Scan(src any) error {
	if src == nil {
		*m.t = nil
		return nil
	}
	var t time.Time
	if err := (msTime{&t}).Scan(src); err != nil {
		return err
	}
	*m.t = &t
	return nil
}

func scanLease(row *sql.Row) (storage.Lease, error) {
	var l storage.Lease
	err := row.Scan(&l.Owner, &l.Term, msTime{&l.AcquiredAt}, msTime{&l.ExpiresAt}, msTime{&l.DBNow})
	if errors.Is(err, sql.ErrNoRows) {
		return l, storage.ErrNotFound
	}
	return l, err
}

// LeaseAttemptElect implements storage.Store. The conditional update and,
// when it elected nobody, the read of the live lease share one transaction.
func (s *Store) LeaseAttemptElect(ctx context.Context, p storage.LeaseAttemptElectParams) (storage.Lease, bool, error) {
	var l storage.Lease
	var elected bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		elected = false // a write that runs again starts its outcome over
		var err error
		l, err = scanLease(tx.QueryRowContext(ctx, queries.Get("lease_attempt_elect"), p.Owner, millis(p.TTL)))
		if err == nil {
			elected = true
			return nil
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		l, err = scanLease(tx.QueryRowContext(ctx, queries.Get("lease_read")))
		return err
	})
	if err != nil {
		return l, false, s.wrap("lease elect for "+p.Owner, err)
	}
	return l, elected, nil
}

// LeaseAttemptRenew implements storage.Store.
func (s *Store) LeaseAttemptRenew(ctx context.Context, p storage.LeaseAttemptRenewParams) (storage.Lease, error) {
	var l storage.Lease
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		l, err = scanLease(tx.QueryRowContext(ctx, queries.Get("lease_attempt_renew"), p.Owner, p.Term, millis(p.TTL)))
		return err
	})
	if errors.Is(err, storage.ErrNotFound) {
		return l, storage.ErrLeaseLost
	}
	if err != nil {
		return l, s.wrap(fmt.Sprintf("lease renew for term %d", p.Term), err)
	}
	return l, nil
}

// LeaseResign implements storage.Store.
func (s *Store) LeaseResign(ctx context.Context, p storage.LeaseResignParams) (bool, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, queries.Get("lease_resign"), p.Owner, p.Term)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, s.wrap(fmt.Sprintf("lease resign for term %d", p.Term), err)
	}
	return n > 0, nil
}

// LeaseRead implements storage.Store.
func (s *Store) LeaseRead(ctx context.Context) (storage.Lease, error) {
	l, err := scanLease(s.db.QueryRowContext(ctx, queries.Get("lease_read")))
	return l, s.wrap("lease read", err)
}

// NodeHeartbeat implements storage.Store.
func (s *Store) NodeHeartbeat(ctx context.Context, p storage.NodeHeartbeatParams) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, queries.Get("node_heartbeat"), p.NodeID, p.Host, p.PID, p.IsLeader, p.ConfigVersion, p.Started, p.ConfigFingerprint, p.ConfigFailedVersion, p.ConfigError)
		return err
	})
	return s.wrap("node heartbeat for "+p.NodeID, err)
}

// NodeLeave implements storage.Store.
func (s *Store) NodeLeave(ctx context.Context, p storage.NodeLeaveParams) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, queries.Get("node_leave"), p.NodeID)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return storage.ErrNotFound
		}
		return nil
	})
	if errors.Is(err, storage.ErrNotFound) {
		return err
	}
	return s.wrap("node leave for "+p.NodeID, err)
}

// NodeList implements storage.Store.
func (s *Store) NodeList(ctx context.Context) (storage.NodeList, error) {
	var out storage.NodeList
	rows, err := s.db.QueryContext(ctx, queries.Get("node_list"))
	if err != nil {
		return out, s.wrap("node list", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, host, status, fp, cfgError sql.NullString
			pid, cfgVersion, cfgFailed     sql.NullInt64
			startedAt, lastSeen            *time.Time
			isLeader                       sql.NullBool
		)
		if err := rows.Scan(msTime{&out.DBNow}, &id, &host, &pid, &status,
			nullMsTime{&startedAt}, nullMsTime{&lastSeen}, &isLeader, &cfgVersion, &fp, &cfgFailed, &cfgError); err != nil {
			return out, s.wrap("node list", err)
		}
		if !id.Valid { // the clock row of an empty table
			continue
		}
		out.Nodes = append(out.Nodes, storage.Node{
			NodeID: id.String, Host: host.String, PID: pid.Int64, Status: status.String, StartedAt: *startedAt,
			LastSeen: *lastSeen, IsLeader: isLeader.Bool, ConfigVersion: cfgVersion.Int64, ConfigFingerprint: fp.String,
			ConfigFailedVersion: cfgFailed.Int64, ConfigError: cfgError.String,
		})
	}
	return out, s.wrap("node list", rows.Err())
}

// MessageIngest implements storage.Store: the whole batch in one BEGIN
// IMMEDIATE transaction, which also serialises ingests so that queue ids
// become visible in id order.
func (s *Store) MessageIngest(ctx context.Context, p storage.MessageIngestParams) ([]storage.IngestedMessage, error) {
	out := make([]storage.IngestedMessage, len(p.Messages))
	err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
		insMsg, err := s.prepared(ctx, tx, queries.Get("message_ingest"))
		if err != nil {
			return err
		}
		insQueue, err := s.prepared(ctx, tx, queries.Get("message_ingest_queue"))
		if err != nil {
			return err
		}
		// Exec and the rowid (the id: INTEGER PRIMARY KEY) rather than
		// RETURNING: a result costs much less than a result set.
		for i, m := range p.Messages {
			if m.Payload == nil {
				m.Payload = []byte{} // NOT NULL: an empty message is stored empty (a nil slice binds NULL)
			}
			if out[i].MessageID, err = insertID(ctx, insMsg, m.Inbound, m.ControlID, m.MessageType, m.Payload, m.Status, m.Error); err != nil {
				return fmt.Errorf("insert message %d of %d: %w", i+1, len(p.Messages), err)
			}
			out[i].QueueIDs = make([]int64, len(m.Deliveries))
			for j, d := range m.Deliveries {
				if out[i].QueueIDs[j], err = insertID(ctx, insQueue, out[i].MessageID, d.Destination, d.Lane); err != nil {
					return fmt.Errorf("insert queue row %d of message %d of %d: %w", j+1, i+1, len(p.Messages), err)
				}
			}
		}
		return nil
	})
	if err != nil {
		if r := refusal(err); r != nil {
			err = r // not the driver's message: it may quote the value
		}
		return nil, s.wrap("message ingest", err)
	}
	return out, nil
}

// refusal returns storage.ErrRefused for an error of the data the write
// carried (SQLITE_TOOBIG, SQLITE_MISMATCH, a CHECK or NOT NULL constraint,
// an operator's trigger raising ABORT, FAIL or ROLLBACK for a row), and nil
// for any other error, a unique or primary key violation included: that
// comes of the database's state, not of the message (see postgres).
func refusal(err error) error {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return nil
	}
	switch c := e.Code(); {
	case c&0xff == sqlite3.SQLITE_TOOBIG, c&0xff == sqlite3.SQLITE_MISMATCH,
		c == sqlite3.SQLITE_CONSTRAINT_CHECK, c == sqlite3.SQLITE_CONSTRAINT_NOTNULL, c == sqlite3.SQLITE_CONSTRAINT_TRIGGER:
		return storage.Refused(fmt.Sprintf("SQLite error %d", e.Code()))
	}
	return nil
}

// insertID runs a one-row INSERT and returns the id it gave the row.
// insertID runs one INSERT and returns the new row's id. A row not
// inserted (an operator's trigger doing RAISE(IGNORE)) is a refusal: the
// last insert id would then be an earlier row's, and a queue row would
// name another message, or a message be stored without its delivery.
func insertID(ctx context.Context, stmt *sql.Stmt, args ...any) (int64, error) {
	res, err := stmt.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, err
	} else if n != 1 {
		return 0, storage.Refused(fmt.Sprintf("the row was not inserted (%d rows; a trigger's RAISE(IGNORE)?)", n))
	}
	return res.LastInsertId()
}

func queueRowDest(r *storage.QueueRow) []any {
	return []any{&r.ID, &r.MessageID, &r.Destination, &r.Lane, &r.Status, &r.Attempts, msTime{&r.NextAttemptAt},
		&r.LeaseOwner, nullMsTime{&r.LeaseExpiresAt}, &r.LastError, msTime{&r.CreatedAt}, msTime{&r.UpdatedAt}, &r.Held}
}

// MessageRead implements storage.Store. The message and its queue rows come
// from one snapshot.
func (s *Store) MessageRead(ctx context.Context, id int64) (storage.MessageDetail, error) {
	var d storage.MessageDetail
	err := s.read(ctx, func(tx *sql.Tx) error {
		m := &d.Message
		err := tx.QueryRowContext(ctx, queries.Get("message_read"), id).Scan(
			&m.ID, &m.Inbound, msTime{&m.ReceivedAt}, &m.ControlID, &m.MessageType, &m.Payload, &m.Status, &m.Error)
		if errors.Is(err, sql.ErrNoRows) {
			return storage.ErrNotFound
		}
		if err != nil {
			return err
		}
		if m.Payload == nil { // NOT NULL: an empty blob
			m.Payload = []byte{}
		}
		rows, err := tx.QueryContext(ctx, queries.Get("queue_by_message"), id)
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
		return rows.Err()
	})
	if errors.Is(err, storage.ErrNotFound) {
		return d, err
	}
	return d, s.wrap(fmt.Sprintf("message read %d", id), err)
}

// MessageSearch implements storage.Store: one statement in a read
// transaction (message_search.sql).
func (s *Store) MessageSearch(ctx context.Context, p storage.MessageSearchParams) ([]storage.MessageSummary, error) {
	if err := p.CheckSearch(); err != nil {
		return nil, err
	}
	var out []storage.MessageSummary
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, queries.Get("message_search"), ceilMillis(p.Since), ceilMillis(p.SearchUntil()),
			p.ControlID, p.Inbound, p.Status, p.SearchBefore(), p.Limit)
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
			if err := rows.Scan(&m.ID, &m.Inbound, msTime{&m.ReceivedAt}, &m.ControlID, &m.MessageType, &m.Status, &m.Error, &qID, &qDest, &qStatus); err != nil {
				return err
			}
			out = storage.AppendSummary(out, m, qID, qDest, qStatus)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.wrap("message search", err)
	}
	return out, nil
}

// ceilMillis is t as Unix milliseconds, the precision received_at is kept
// in, rounded up: received_at >= t (or < t) holds of a stored time exactly
// when it holds against the rounded value.
func ceilMillis(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// MessageResend implements storage.Store: the rows, the mark of the dead
// rows resent (message_resend_mark.sql) and the queue's version in one
// write transaction. SQLite has one writer, so it is serialised with
// every ingest, and its ids become visible in id order.
func (s *Store) MessageResend(ctx context.Context, p storage.MessageResendParams) ([]int64, error) {
	ids := make([]int64, len(p.Deliveries))
	err := s.write(ctx, func(tx *sql.Tx) error {
		var queued bool
		if err := tx.QueryRowContext(ctx, queries.Get("message_resend_queued"), p.MessageID).Scan(&queued); err != nil {
			return err
		}
		if !queued {
			return unchanged{storage.ErrNotFound} // no such message, or its rows are purged
		}
		insQueue, err := s.prepared(ctx, tx, queries.Get("message_ingest_queue"))
		if err != nil {
			return err
		}
		mark, err := s.prepared(ctx, tx, queries.Get("message_resend_mark"))
		if err != nil {
			return err
		}
		for i, d := range p.Deliveries {
			if ids[i], err = insertID(ctx, insQueue, p.MessageID, d.Destination, d.Lane); err != nil {
				return fmt.Errorf("insert queue row %d of %d: %w", i+1, len(p.Deliveries), err)
			}
			if _, err := mark.ExecContext(ctx, p.MessageID, d.Destination, ids[i]); err != nil {
				return fmt.Errorf("mark the dead rows of %d resent: %w", p.MessageID, err)
			}
		}
		_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
		return err
	})
	if err != nil {
		if r := refusal(err); r != nil {
			err = r // not the driver's message: it may quote the value
		}
		return nil, s.wrap(fmt.Sprintf("message resend of %d", p.MessageID), err)
	}
	return ids, nil
}

// QueueResendDead implements storage.Store (storage.ResendDead): each
// write transaction reads its dead rows, gives each the lane of the routes
// in force (p.Lane), inserts the new rows in their order
// (message_ingest_queue.sql, as MessageResend), marks the dead ones and
// bumps the queue's version. SQLite has one writer, so each is serialised
// with every ingest and the purge, and its ids become visible in id order.
func (s *Store) QueueResendDead(ctx context.Context, p storage.QueueResendDeadParams) (storage.ResentDead, error) {
	if p.Lane == nil {
		return storage.ResentDead{}, storage.ErrNoResendLane
	}
	bound := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return ceilMillis(t)
	}
	res, err := storage.ResendDead(p.Limit, func(after, before int64, n int) (c storage.ResendChunk, err error) {
		err = s.write(ctx, func(tx *sql.Tx) error {
			c = storage.ResendChunk{}
			dead, err := storage.DeadRows(ctx, tx, queries.Get("queue_resend_dead_pick"), p.Destination, after, before, bound(p.Since), bound(p.Until), n)
			if err != nil {
				return err
			}
			var resend []storage.DeadRow
			resend, c = p.Relane(dead)
			if len(resend) == 0 {
				return unchanged{nil}
			}
			insQueue, err := s.prepared(ctx, tx, queries.Get("message_ingest_queue"))
			if err != nil {
				return err
			}
			mark, err := s.prepared(ctx, tx, queries.Get("queue_resend_dead_mark"))
			if err != nil {
				return err
			}
			c.Old, c.New = make([]int64, len(resend)), make([]int64, len(resend))
			for i, d := range resend {
				c.Old[i] = d.ID
				if c.New[i], err = insertID(ctx, insQueue, d.MessageID, p.Destination, d.Lane); err != nil {
					return fmt.Errorf("insert queue row %d of %d: %w", i+1, len(resend), err)
				}
				if _, err := mark.ExecContext(ctx, d.ID, c.New[i]); err != nil {
					return fmt.Errorf("mark dead row %d resent: %w", d.ID, err)
				}
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
			err = r // not the driver's message: it may quote the value
		}
		return res, s.wrap(fmt.Sprintf("resend of %s's dead rows", p.Destination), err)
	}
	return res, nil
}

// MessagePurge implements storage.Store: at most p.Limit rows of each
// table, in write transactions of at most storage.PurgeChunk rows each
// (storage.Purge).
//
// Every write waits for SQLite's one writer, so a batch deleted in one
// transaction held every ingest (and its ACK) for the whole batch: 0.1 to
// 1.4 s for the sweeper's 10,000 rows on a 2-core machine
// (bench/sqliteage). Between transactions the writes queued meanwhile go
// first.
//
// Each transaction deletes the messages of the queue rows it deleted, found
// by id (message_purge_freed.sql). Once the finished rows are all gone, the
// messages that never had one are found by a walk that goes on from where
// the last one stopped (message_purge_walk.sql): the walk from the oldest
// message past the cut-off went over every message whose rows were not all
// finished (a destination blocked for days: all its backlog) at every
// hourly purge, in one write transaction.
func (s *Store) MessagePurge(ctx context.Context, p storage.MessagePurgeParams) (storage.PurgeResult, error) {
	cutoff := millis(p.OlderThan)
	res, err := storage.Purge(p.Limit, func(q int64, first bool) (storage.PurgeResult, error) {
		return s.purgeFinished(ctx, p.Fence, cutoff, q, first)
	}, func(w int64) (int64, int64, error) {
		return s.purgeWalk(ctx, p.Fence, cutoff, w)
	})
	if err != nil {
		return storage.PurgeResult{}, s.wrap("message purge", err)
	}
	return res, nil
}

// purgeFinished is one write of MessagePurge: at most q finished queue
// rows, the messages they leave with no queue row, and (first) the nodes
// not seen since the cut-off.
func (s *Store) purgeFinished(ctx context.Context, f storage.Fence, cutoff, q int64, first bool) (storage.PurgeResult, error) {
	var res storage.PurgeResult
	err := s.fenced(ctx, f, func(tx *sql.Tx) error {
		res = storage.PurgeResult{}
		rows, err := tx.QueryContext(ctx, queries.Get("message_purge_queue"), cutoff, q)
		if err != nil {
			return fmt.Errorf("purge queue rows: %w", err)
		}
		var freed []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("purge queue rows: %w", err)
			}
			freed = append(freed, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("purge queue rows: %w", err)
		}
		res.QueueRows = int64(len(freed))
		if len(freed) > 0 {
			ids, _ := json.Marshal(freed)
			r, err := tx.ExecContext(ctx, queries.Get("message_purge_freed"), string(ids), cutoff)
			if err != nil {
				return fmt.Errorf("purge messages: %w", err)
			}
			if res.Messages, err = r.RowsAffected(); err != nil {
				return err
			}
		}
		if !first {
			return nil
		}
		r, err := tx.ExecContext(ctx, queries.Get("node_purge"), cutoff)
		if err != nil {
			return fmt.Errorf("purge nodes: %w", err)
		}
		res.Nodes, err = r.RowsAffected()
		return err
	})
	return res, err
}

// purgeWalk is one write of MessagePurge's walk for the messages never
// queued: it walks past at most w messages past the cut-off, from where the
// last walk stopped, deletes those no queue row names, and keeps where it
// stopped (message_purge_walk.sql).
func (s *Store) purgeWalk(ctx context.Context, f storage.Fence, cutoff, w int64) (deleted, passed int64, err error) {
	err = s.fenced(ctx, f, func(tx *sql.Tx) error {
		deleted, passed = 0, 0
		var from, to int64
		if err := tx.QueryRowContext(ctx, queries.Get("message_purge_walk"), cutoff, w).Scan(&from, &to, &passed); err != nil {
			return fmt.Errorf("purge walk: %w", err)
		}
		if passed == 0 {
			return nil
		}
		r, err := tx.ExecContext(ctx, queries.Get("message_purge_walked"), from, to, cutoff)
		if err != nil {
			return fmt.Errorf("purge messages: %w", err)
		}
		if deleted, err = r.RowsAffected(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, queries.Get("message_purge_walk_mark"), to); err != nil {
			return fmt.Errorf("purge walk mark: %w", err)
		}
		return nil
	})
	return deleted, passed, err
}

// QueueClaimNext implements storage.Store: fence, reclaim the stranded head,
// claim the head if it is pending and due; see queue_claim_next.sql.
func (s *Store) QueueClaimNext(ctx context.Context, p storage.QueueClaimNextParams) (storage.QueueClaim, error) {
	var c *storage.QueueClaim
	err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
		run, err := s.claimRun(ctx, tx, p.Lane, p.From, p.Owner, p.LeaseTTL, 0)
		if err == nil && len(run) == 0 {
			err = unchanged{storage.ErrNoWork}
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
		return storage.QueueClaim{}, s.wrap(fmt.Sprintf("queue claim from row %d", p.From), err)
	}
	return *c, nil
}

// QueueAdvance implements storage.Store: the completion and the claim in
// one write of a group commit.
func (s *Store) QueueAdvance(ctx context.Context, p storage.QueueAdvanceParams) (storage.QueueAdvanced, error) {
	var out storage.QueueAdvanced
	err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
		out = storage.QueueAdvanced{} // a batch run again (commit) starts afresh
		n, err := s.updateClaim(ctx, tx, "queue_complete", p.Claim)
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		out.Completed = n == 1
		run, err := s.claimRun(ctx, tx, p.Lane, p.Claim.ID, p.Owner, p.LeaseTTL, p.Ahead)
		if len(run) > 0 {
			out.Next, out.Ahead = &run[0], run[1:]
		}
		return err
	})
	if err != nil {
		return storage.QueueAdvanced{}, s.wrap(fmt.Sprintf("queue advance of row %d attempt %d", p.Claim.ID, p.Claim.Attempt), err)
	}
	return out, nil
}

// QueueGiveBack implements storage.Store: one write of a group commit.
func (s *Store) QueueGiveBack(ctx context.Context, p storage.QueueGiveBackParams) (int64, error) {
	if len(p.Claims) == 0 {
		return 0, nil
	}
	var total int64
	err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
		total = 0
		for i, c := range p.Claims {
			e, d := p.Noted(i)
			n, err := s.updateClaim(ctx, tx, "queue_give_back", c, e, d)
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	if err != nil {
		return 0, s.wrap(fmt.Sprintf("queue give back of %d rows", len(p.Claims)), err)
	}
	return total, nil
}

// QueueReleaseOwn implements storage.Store: one write of a group commit.
func (s *Store) QueueReleaseOwn(ctx context.Context, p storage.QueueReleaseOwnParams) (int64, error) {
	var n int64
	err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, queries.Get("queue_release_own"), p.Lane, p.Owner)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, s.wrap("queue release own", err) // not the lane: its key is often a patient id
	}
	return n, nil
}

// maxRun is the most rows one lane claim takes: the inner LIMIT of
// queue_claim_run.sql, a constant there (see why in that file).
const maxRun = 16

// claimRun is the lane claim in tx (queue_claim_next.sql, or with ahead
// queue_claim_run.sql): the claimed head and up to ahead rows right behind
// it (at most maxRun in all), in id order, or none when the lane has
// nothing claimable.
func (s *Store) claimRun(ctx context.Context, tx *sql.Tx, lane string, from int64, owner string, ttl time.Duration, ahead int) ([]storage.QueueClaim, error) {
	query, args := "queue_claim_next", []any{lane, owner, millis(ttl), from}
	if ahead > 0 {
		query, args = "queue_claim_run", append(args, min(1+ahead, maxRun))
	}
	claim, err := s.prepared(ctx, tx, queries.Get(query))
	if err != nil {
		return nil, err
	}
	rows, err := claim.QueryContext(ctx, args...)
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
		if c.Payload == nil { // NOT NULL: an empty blob
			c.Payload = []byte{}
		}
		run = append(run, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(run, func(a, b storage.QueueClaim) int { return cmp.Compare(a.Row.ID, b.Row.ID) })
	return run, nil
}

// claimUpdate runs one of the statements that act on a current claim and
// tells ErrNotFound from ErrClaimLost when it matched nothing.
func (s *Store) claimUpdate(ctx context.Context, op string, f storage.Fence, c storage.Claim, args ...any) error {
	err := s.fenced(ctx, f, func(tx *sql.Tx) error {
		n, err := s.updateClaim(ctx, tx, op, c, args...)
		if err != nil || n == 1 {
			return err
		}
		return unchangedOr(refusals.MissingOr(ctx, tx, c.ID, storage.ErrClaimLost))
	})
	return s.wrap(fmt.Sprintf("%s of queue row %d attempt %d", op, c.ID, c.Attempt), err)
}

// updateClaim runs op on the row of claim c in tx and returns the rows it
// changed: 1, or 0 when the claim is no longer current.
func (s *Store) updateClaim(ctx context.Context, tx *sql.Tx, op string, c storage.Claim, args ...any) (int64, error) {
	update, err := s.prepared(ctx, tx, queries.Get(op))
	if err != nil {
		return 0, err
	}
	res, err := update.ExecContext(ctx, append([]any{c.ID, c.Owner, c.Attempt}, args...)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueueComplete implements storage.Store.
func (s *Store) QueueComplete(ctx context.Context, p storage.QueueCompleteParams) error {
	return s.claimUpdate(ctx, "queue_complete", p.Fence, p.Claim)
}

// QueueRetry implements storage.Store. The delay is truncated to whole
// milliseconds, never rounded up: SQLite's clock is in whole milliseconds, so
// the row is then due no later than p.Delay after the call, and a lane that
// waits p.Delay (its backoff timer) finds it due.
func (s *Store) QueueRetry(ctx context.Context, p storage.QueueRetryParams) error {
	return s.claimUpdate(ctx, "queue_retry", p.Fence, p.Claim, p.Delay.Milliseconds(), p.Error, p.Detail)
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
	return s.operatorUpdate(ctx, "queue_release", refusals.NotPending, p.ID)
}

// QueueSkip implements storage.Store.
func (s *Store) QueueSkip(ctx context.Context, p storage.QueueSkipParams) (storage.QueueActed, error) {
	return s.operatorUpdate(ctx, "queue_skip", refusals.NotSkipped, p.ID, p.Reason)
}

// operatorUpdate runs an operator action on a row and returns the row's
// message and destination (its statement's RETURNING), or, when it matched
// nothing, why as refused tells it (refusals.NotPending, refusals.NotSkipped).
func (s *Store) operatorUpdate(ctx context.Context, op string, refused func(context.Context, storage.SQLRowQuerier, int64) error, id int64, args ...any) (storage.QueueActed, error) {
	var acted storage.QueueActed
	err := s.write(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, queries.Get(op), append([]any{id}, args...)...).Scan(&acted.MessageID, &acted.Destination)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return unchangedOr(refused(ctx, tx, id))
		case err != nil:
			return err
		}
		_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
		return err
	})
	if err != nil {
		return storage.QueueActed{}, s.wrap(fmt.Sprintf("%s of queue row %d", op, id), err)
	}
	return acted, nil
}

// QueueExtendLease implements storage.Store.
func (s *Store) QueueExtendLease(ctx context.Context, p storage.QueueExtendLeaseParams) error {
	return s.claimUpdate(ctx, "queue_extend_lease", p.Fence, p.Claim, millis(p.TTL))
}

// repend runs one fenced statement that re-pends rows and returns how many
// it changed; if any, it bumps the queue's version in the same transaction
// (storage.QueueVersionName).
func (s *Store) repend(ctx context.Context, op string, f storage.Fence, args ...any) (int64, error) {
	var n int64
	err := s.fenced(ctx, f, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, queries.Get(op), args...)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
		return err
	})
	if err != nil {
		return 0, s.wrap(strings.ReplaceAll(op, "_", " "), err)
	}
	return n, nil
}

// QueueRecoverForeign implements storage.Store.
func (s *Store) QueueRecoverForeign(ctx context.Context, p storage.QueueRecoverForeignParams) (int64, error) {
	return s.repend(ctx, "queue_recover_foreign", p.Fence, p.Owner)
}

// QueueReclaimExpired implements storage.Store.
func (s *Store) QueueReclaimExpired(ctx context.Context, p storage.QueueReclaimExpiredParams) (int64, error) {
	return s.repend(ctx, "queue_reclaim_expired", p.Fence)
}

// QueueLanes implements storage.Store.
func (s *Store) QueueLanes(ctx context.Context, p storage.QueueLanesParams) ([]storage.LaneSummary, error) {
	if p.Limit <= 0 {
		return storage.AllLanes(ctx, s.QueueLanes)
	}
	rows, err := s.db.QueryContext(ctx, queries.Get("queue_lanes"), p.After, p.Limit)
	if err != nil {
		return nil, s.wrap("queue lanes", err)
	}
	defer rows.Close()
	var out []storage.LaneSummary
	for rows.Next() {
		var l storage.LaneSummary
		var ageMS int64
		dest := append([]any{&l.Lane, &l.Destination, &l.Depth}, queueRowDest(&l.Head)...)
		if err := rows.Scan(append(dest, &ageMS, &l.Claimable, &l.Head.LastErrorDetail)...); err != nil {
			return nil, s.wrap("queue lanes", err)
		}
		l.HeadAge = time.Duration(ageMS) * time.Millisecond
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("queue lanes", err)
	}
	return out, nil
}

// QueueStats implements storage.Store.
func (s *Store) QueueStats(ctx context.Context) ([]storage.QueueStat, error) {
	rows, err := s.db.QueryContext(ctx, queries.Get("queue_stats"))
	if err != nil {
		return nil, s.wrap("queue stats", err)
	}
	defer rows.Close()
	out := []storage.QueueStat{}
	for rows.Next() {
		var st storage.QueueStat
		var oldestMS int64
		if err := rows.Scan(&st.Destination, &st.Status, &st.Count, &st.Held, &oldestMS); err != nil {
			return nil, s.wrap("queue stats", err)
		}
		st.OldestAge = time.Duration(oldestMS) * time.Millisecond
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("queue stats", err)
	}
	return out, nil
}

// QueueLaneKeys implements storage.Store.
func (s *Store) QueueLaneKeys(ctx context.Context) (map[string]string, error) {
	out, err := storage.LaneKeys(ctx, s.db, queries.Get("queue_lane_keys"))
	if err != nil {
		return nil, s.wrap("queue lane keys", err)
	}
	return out, nil
}

// QueueLaneKeyRecord implements storage.Store.
func (s *Store) QueueLaneKeyRecord(ctx context.Context, p storage.QueueLaneKeyRecordParams) error {
	if len(p.LaneKey) > storage.MaxLaneKeyBytes {
		return fmt.Errorf("sqlite: queue lane key record: %d bytes, at most %d", len(p.LaneKey), storage.MaxLaneKeyBytes)
	}
	err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, queries.Get("queue_lane_key_record"), p.Destination, p.LaneKey)
		return err
	})
	return s.wrap("queue lane key record", err)
}

// QueueRelaneRead implements storage.Store.
func (s *Store) QueueRelaneRead(ctx context.Context, p storage.QueueRelaneReadParams) ([]storage.RelaneRow, error) {
	rows, err := s.db.QueryContext(ctx, queries.Get("queue_relane_read"), p.Destination, p.AfterLane, p.AfterID, p.Limit)
	if err != nil {
		return nil, s.wrap("queue relane read", err)
	}
	defer rows.Close()
	var out []storage.RelaneRow
	for rows.Next() {
		var r storage.RelaneRow
		if err := rows.Scan(&r.ID, &r.Lane, &r.Inbound, &r.Payload); err != nil {
			return nil, s.wrap("queue relane read", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("queue relane read", err)
	}
	return out, nil
}

// QueueRelane implements storage.Store.
func (s *Store) QueueRelane(ctx context.Context, p storage.QueueRelaneParams) (int64, error) {
	var n int64
	err := s.fenced(ctx, p.Fence, func(tx *sql.Tx) error {
		n = 0
		st, err := s.prepared(ctx, tx, queries.Get("queue_relane"))
		if err != nil {
			return err
		}
		for _, m := range p.Moves {
			res, err := st.ExecContext(ctx, m.ID, m.Lane)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += k
		}
		return nil
	})
	if err != nil {
		return 0, s.wrap("queue relane", err)
	}
	return n, nil
}

// OutboundHold implements storage.Store.
func (s *Store) OutboundHold(ctx context.Context, p storage.OutboundHoldParams) (storage.OutboundHeld, error) {
	if err := storage.CheckOutbound(p.Outbound); err != nil {
		return storage.OutboundHeld{}, err
	}
	h := storage.OutboundHeld{Outbound: p.Outbound}
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, queries.Get("outbound_hold"), p.Outbound)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			if _, err := bumpVersion(ctx, tx, storage.QueueVersionName); err != nil {
				return err
			}
		}
		return tx.QueryRowContext(ctx, queries.Get("outbound_hold_read"), p.Outbound).Scan(msTime{&h.Since})
	})
	if err != nil {
		return storage.OutboundHeld{}, s.wrap("outbound hold", err)
	}
	return h, nil
}

// OutboundRelease implements storage.Store.
func (s *Store) OutboundRelease(ctx context.Context, p storage.OutboundReleaseParams) (bool, error) {
	var released bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		released = false // a write that runs again starts its outcome over
		res, err := tx.ExecContext(ctx, queries.Get("outbound_release"), p.Outbound)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil || n == 0 {
			return err
		}
		released = true
		_, err = bumpVersion(ctx, tx, storage.QueueVersionName)
		return err
	})
	if err != nil {
		return false, s.wrap("outbound release", err)
	}
	return released, nil
}

// OutboundHolds implements storage.Store.
func (s *Store) OutboundHolds(ctx context.Context) ([]storage.OutboundHeld, error) {
	rows, err := s.db.QueryContext(ctx, queries.Get("outbound_holds"))
	if err != nil {
		return nil, s.wrap("outbound holds", err)
	}
	defer rows.Close()
	var out []storage.OutboundHeld
	for rows.Next() {
		var h storage.OutboundHeld
		if err := rows.Scan(&h.Outbound, msTime{&h.Since}); err != nil {
			return nil, s.wrap("outbound holds", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("outbound holds", err)
	}
	return out, nil
}

// ConfigVersionBump implements storage.Store.
func (s *Store) ConfigVersionBump(ctx context.Context, p storage.ConfigVersionBumpParams) (int64, error) {
	var v int64
	err := s.write(ctx, func(tx *sql.Tx) (err error) {
		v, err = bumpVersion(ctx, tx, storage.ConfigName(p.Name))
		return err
	})
	if err != nil {
		return 0, s.wrap("config version bump", err)
	}
	return v, nil
}

// bumpVersion increments the version named name in tx and returns it: the
// queue's version (storage.QueueVersionName) moves in the transaction of the
// change it tells of.
func bumpVersion(ctx context.Context, tx *sql.Tx, name string) (int64, error) {
	var v int64
	err := tx.QueryRowContext(ctx, queries.Get("config_version_bump"), name).Scan(&v)
	return v, err
}

// ConfigVersionRead implements storage.Store.
func (s *Store) ConfigVersionRead(ctx context.Context, p storage.ConfigVersionReadParams) (int64, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, queries.Get("config_version_read"), storage.ConfigName(p.Name)).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, s.wrap("config version read", err)
	}
	return v, nil
}

// Secret implements storage.Store: insert-if-absent and the read of the
// value that stands, in one write transaction.
func (s *Store) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	if err := storage.CheckSecret(name, fresh); err != nil {
		return nil, err
	}
	var v []byte
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, queries.Get("secret_insert"), name, fresh); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, queries.Get("secret_read"), name).Scan(&v)
	})
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("secret %q", name), err)
	}
	return v, nil
}

// wrap adds the dialect and operation to an error, keeping the shared
// sentinels matchable with errors.Is, and marks the store damaged when
// SQLite found its file so (damage).
func (s *Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return s.damage(fmt.Errorf("sqlite: %s: %w", op, err))
}

// unchangedOr marks the verdicts of refusals (ErrNotFound, ErrClaimLost,
// ErrNotPending, ErrNotHead) unchanged: they follow an update that matched
// nothing. A failed read stays a failure.
func unchangedOr(err error) error {
	if errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrClaimLost) || errors.Is(err, storage.ErrNotPending) ||
		errors.Is(err, storage.ErrNotHead) {
		return unchanged{err}
	}
	return err
}

// refusals says why a write of one queue row matched nothing. Its looks
// run under the write's lock (SQLite has one writer), so they see what the
// write saw.
var refusals = storage.QueueRefusals{Status: queries.Get("queue_status"), SkipRefused: queries.Get("queue_skip_refused"),
	ID: func(id int64) any { return id }}

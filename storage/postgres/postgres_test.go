package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
	"github.com/messagefoundry/mf/storage/storagetest"
)

// opener gives each test its own schema; every handle is its own pool.
func opener(t testing.TB) func() storage.Store {
	url := pgtest.NewSchema(t)
	return func() storage.Store {
		s, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 4})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

func TestConformancePostgres(t *testing.T) { storagetest.Run(t, opener) }

func BenchmarkPostgres(b *testing.B) { storagetest.Bench(b, opener) }

// A resignation reaches a follower's watcher at once, and one in another
// schema (another cluster) does not.
func TestResignationNotifiesWatchers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := opener(t)
	leader, follower := open().(*postgres.Store), open().(*postgres.Store)
	for _, s := range []storage.Store{leader} {
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	other := opener(t)()
	if err := other.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	notified := make(chan struct{}, 16)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go follower.WatchResignations(wctx, func() { notified <- struct{}{} }, func(err error) { t.Logf("watch: %v", err) })
	select { // the watcher announces itself once it listens
	case <-notified:
	case <-ctx.Done():
		t.Fatal("the watcher never started listening")
	}

	// Another schema's resignation: no notification for this one.
	ol, _, err := other.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "x", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := other.LeaseResign(ctx, storage.LeaseResignParams{Owner: "x", Term: ol.Term}); err != nil || !ok {
		t.Fatalf("resign in the other schema: %v %v", ok, err)
	}

	l, _, err := leader.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if ok, err := leader.LeaseResign(ctx, storage.LeaseResignParams{Owner: "a", Term: l.Term}); err != nil || !ok {
		t.Fatalf("resign: %v %v", ok, err)
	}
	select {
	case <-notified:
		t.Logf("notified %v after the resignation", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("no notification within 5s of the resignation")
	}
	select {
	case <-notified:
		t.Fatal("notified twice: the other schema's resignation leaked in")
	case <-time.After(200 * time.Millisecond):
	}
}

// Autovacuum reports the server's setting as the server has it, and a table
// of this schema that turned autovacuum off for itself, whatever boolean
// spelling it was set with; another schema's table is not this store's.
func TestAutovacuumSaysWhatPostgreSQLVacuums(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := opener(t)
	st := open().(*postgres.Store)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	other := opener(t)().(*postgres.Store)
	if err := other.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var server bool
	if err := st.Pool().QueryRow(ctx, "SELECT current_setting('autovacuum')::bool AND current_setting('track_counts')::bool").Scan(&server); err != nil {
		t.Fatal(err)
	}
	got, err := st.Autovacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Server != server || len(got.Disabled) != 0 {
		t.Fatalf("a new schema: %+v; want Server %v and no table with autovacuum off", got, server)
	}
	for _, sql := range []string{
		"ALTER TABLE mf_queue SET (autovacuum_enabled = 0)",
		"ALTER TABLE mf_messages SET (autovacuum_enabled = off, fillfactor = 90)",
	} {
		if _, err := st.Pool().Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Pool().Exec(ctx, "ALTER TABLE mf_queue SET (autovacuum_enabled = true)"); err != nil {
		t.Fatal(err)
	}
	got, err = st.Autovacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Disabled) != "[mf_messages mf_queue]" {
		t.Fatalf("tables with autovacuum off: %v; want [mf_messages mf_queue]", got.Disabled)
	}
	if _, err := st.Pool().Exec(ctx, "ALTER TABLE mf_messages SET (autovacuum_enabled = yes)"); err != nil {
		t.Fatal(err)
	}
	if got, err = other.Autovacuum(ctx); err != nil || len(got.Disabled) != 0 {
		t.Fatalf("the other schema: %+v, %v; want no table with autovacuum off", got, err)
	}
	if got, err = st.Autovacuum(ctx); err != nil || fmt.Sprint(got.Disabled) != "[mf_queue]" {
		t.Fatalf("after mf_messages turned it on again: %+v, %v; want [mf_queue]", got, err)
	}
}

// What pgx answers is told apart as storage.Unreachable expects: a server
// not listening is the way to it (mf run waits), a database that does not
// exist or a user refused is a setting (mf run exits).
func TestUnreachableOnPgxErrors(t *testing.T) {
	url := pgtest.NewSchema(t) // also fails in CI, or skips, when PostgreSQL is away
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	with := func(f func(u *neturl.URL)) string { c := *u; f(&c); return c.String() }
	for _, c := range []struct {
		name, url string
		want      bool
	}{
		{"nothing listening", with(func(u *neturl.URL) { u.Host = closed }), true},
		{"a database that does not exist", with(func(u *neturl.URL) { u.Path = "/mf_no_such_database" }), false},
		{"a user that does not exist", with(func(u *neturl.URL) { u.User = neturl.User("mf_no_such_user") }), false},
	} {
		s, err := postgres.Open(ctx, postgres.Options{URL: c.url, PoolSize: 1})
		if err != nil {
			t.Fatalf("%s: open: %v", c.name, err)
		}
		err = s.Migrate(ctx)
		s.Close()
		if err == nil {
			t.Fatalf("%s: migrate succeeded", c.name)
		}
		if got := storage.Unreachable(err); got != c.want {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", c.name, err, got, c.want)
		}
	}
}

// A clustered node's sessions end when their client is gone, within about
// the fence timeout: idle in a transaction by idle_in_transaction_session_timeout,
// and in the middle of a pipelined batch (which that timeout does not
// cover) by TCP keepalive, whose default of two hours held the lease row
// against the next election as long, and by tcp_user_timeout when the
// server has output the client never acknowledged (keepalive waits for the
// retransmissions, about 15 minutes). A URL's own settings stay.
func TestAClusteredNodesSessionsEndWhenItsClientIsGone(t *testing.T) {
	url := pgtest.NewSchema(t)
	show := func(s *postgres.Store, param string) string {
		var v string
		if err := s.Pool().QueryRow(context.Background(), "SHOW "+param).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	s, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 2, IdleInTransactionTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var socket bool // over a Unix socket the server keeps no TCP settings: SHOW says 0
	if err := s.Pool().QueryRow(context.Background(), "SELECT inet_server_addr() IS NULL").Scan(&socket); err != nil {
		t.Fatal(err)
	}
	if socket {
		t.Fatalf("MF_TEST_POSTGRES_URL reaches the server over a Unix socket: this test needs TCP (host=127.0.0.1)")
	}
	for param, want := range map[string]string{"idle_in_transaction_session_timeout": "20s", "tcp_keepalives_idle": "10", "tcp_keepalives_interval": "3", "tcp_keepalives_count": "3", "tcp_user_timeout": "20000", "client_connection_check_interval": "1s"} {
		if got := show(s, param); got != want {
			t.Errorf("%s = %s; want %s", param, got, want)
		}
	}
	own, err := postgres.Open(context.Background(), postgres.Options{URL: url + "&tcp_keepalives_idle=60&tcp_user_timeout=90000", PoolSize: 2, IdleInTransactionTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if got := show(own, "tcp_keepalives_idle"); got != "60" {
		t.Errorf("tcp_keepalives_idle set in the URL = %s; want the URL's 60", got)
	}
	if got := show(own, "tcp_user_timeout"); got != "90000" {
		t.Errorf("tcp_user_timeout set in the URL = %s; want the URL's 90000", got)
	}
}

// A clustered node's statement waiting on a lock ends with its client: a
// backend waiting on a lock reads nothing from its socket, and the write of
// a primary killed while it waited (on a queue row an operator's open
// transaction holds) went on waiting, holding its fence's share lock on the
// lease row, for as long as that lock was held: no election could end
// meanwhile. Here a process whose statement waits on a lock is killed
// (SIGKILL: no cancel request is sent, as pgx sends for a live client's
// timeout); its backend must end (client_connection_check_interval) while
// the lock is still held.
func TestAStatementWaitingOnALockEndsWithItsClient(t *testing.T) {
	if os.Getenv("MF_TEST_LOCK_WAITER_URL") != "" {
		lockWaiter(t, os.Getenv("MF_TEST_LOCK_WAITER_URL"))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewSchema(t)
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	for _, q := range []string{"CREATE TABLE held (id int PRIMARY KEY)", "INSERT INTO held VALUES (1)", "BEGIN", "SELECT * FROM held FOR UPDATE"} {
		if _, err := holder.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	child := exec.Command(os.Args[0], "-test.run=^TestAStatementWaitingOnALockEndsWithItsClient$")
	child.Env = append(os.Environ(), "MF_TEST_LOCK_WAITER_URL="+url)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	var pid int
	if _, err := fmt.Fscanf(out, "backend %d\n", &pid); err != nil {
		t.Fatalf("the waiting process said no backend pid: %v", err)
	}
	watcher, err := pgx.Connect(ctx, url) // not the holder: in a transaction, pg_stat_activity stays as first read
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	waiting := func(want string) bool {
		var n int
		if err := watcher.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND ($2 = '' OR wait_event_type = $2)", pid, want).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	until(t, "the statement waiting on the lock", func() bool { return waiting("Lock") })
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	until(t, "the backend of the killed client to end, the lock still held", func() bool { return !waiting("") })
}

// lockWaiter is the process TestAStatementWaitingOnALockEndsWithItsClient
// kills: a clustered node's store, one of whose sessions waits on the
// lock of table held's row; it prints its backend's pid first.
func lockWaiter(t *testing.T, url string) {
	ctx := context.Background()
	s, err := postgres.Open(ctx, postgres.Options{URL: url, PoolSize: 1, IdleInTransactionTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("backend %d\n", c.Conn().PgConn().PID())
	_, err = c.Exec(ctx, "SELECT * FROM held FOR UPDATE")
	t.Fatalf("the lock wait ended: %v", err) // only the kill ends it
}

// until polls cond every 50 ms until it holds, for at most 10 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
	}
}

// A row an operator's trigger skips (BEFORE INSERT returning NULL) fails the
// ingest as refused, as on SQLite: the message row of an unrouted message
// has no queue row to trip the foreign key, and its id was returned all the
// same, so its sender was answered AA with nothing stored (a review found
// it). A skipped queue row committed the message with the delivery missing.
// The other messages of the batch are not stored either: the listener
// stores them again without the refused one.
func TestARowATriggerSkipsIsRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, table, when string }{
		{"message of an unrouted message", "mf_messages", "NEW.control_id = 'M2'"},
		{"queue row", "mf_queue", "NEW.lane = 'lab/P2'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := opener(t)().(*postgres.Store)
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				`CREATE FUNCTION mf_test_skip() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF ` + tc.when + ` THEN RETURN NULL; END IF; RETURN NEW; END $$`,
				`CREATE TRIGGER mf_test_skip BEFORE INSERT ON ` + tc.table + ` FOR EACH ROW EXECUTE FUNCTION mf_test_skip()`,
			} {
				if _, err := s.Pool().Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			msg := func(id, lane string) storage.NewMessage {
				m := storage.NewMessage{Inbound: "in", ControlID: id, MessageType: "ADT^A01", Payload: []byte("MSH|" + id), Status: storage.MessageUnrouted}
				if lane != "" {
					m.Status, m.Deliveries = storage.MessageRouted, []storage.Delivery{{Destination: "lab", Lane: lane}}
				}
				return m
			}
			second := msg("M2", "")
			if tc.table == "mf_queue" {
				second = msg("M2", "lab/P2")
			}
			out, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{msg("M1", "lab/P1"), second}})
			if err == nil {
				for _, m := range out {
					d, rerr := s.MessageRead(ctx, m.MessageID)
					t.Logf("message %d: %q, %d queue rows (read: %v)", m.MessageID, d.Message.ControlID, len(d.Queue), rerr)
				}
				t.Fatalf("ingest with a row skipped by a trigger: %+v, no error; want storage.ErrRefused", out)
			}
			if !errors.Is(err, storage.ErrRefused) || !strings.Contains(err.Error(), "a trigger skipped a row") {
				t.Fatalf("ingest with a row skipped by a trigger: %v; want storage.ErrRefused saying a trigger skipped a row", err)
			}
			var n int
			if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM mf_messages`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%d messages stored (%v); want none: the batch fails whole", n, err)
			}
			// A batch the trigger lets through is stored as before.
			if out, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{msg("M1", "lab/P1"), msg("M3", "")}}); err != nil || len(out) != 2 || len(out[0].QueueIDs) != 1 || len(out[1].QueueIDs) != 0 {
				t.Fatalf("a batch the trigger lets through: %+v, %v", out, err)
			}
		})
	}
}

package postgres_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A DBA's statement_timeout, lock_timeout or idle_session_timeout for mf's
// role cut mf's own calls short: every store call already has mf's deadline
// (the ingest's grows with the size of the batch), a fence waits for the
// table locks of maintenance by design, and the resignation listener sits
// idle on its session. With a statement_timeout of 10ms a 1 MiB message was
// never stored (AE to its sender, which resent it for ever); with
// idle_session_timeout the listener was dropped, reconnected and logged
// every few seconds. mf's sessions set the three to 0.
func TestSessionsDisregardTheRolesTimeouts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	roleURL := pgtest.NewRole(t, ctx, pgtest.NewSchema(t),
		"ALTER ROLE %ROLE SET statement_timeout = '20ms'",
		"ALTER ROLE %ROLE SET lock_timeout = '1ms'",
		"ALTER ROLE %ROLE SET idle_session_timeout = '300ms'")
	s, err := postgres.Open(ctx, postgres.Options{URL: roleURL, PoolSize: 2, IdleInTransactionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate with the role's statement_timeout of 20ms: %v", err)
	}
	big := bytes.Repeat([]byte("OBX|1|TX|||"), 100_000) // about 1 MiB
	if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
		Inbound: "in", Payload: big, Status: storage.MessageRouted,
		Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/1"}},
	}}}); err != nil {
		t.Fatalf("ingest of a 1 MiB message with the role's statement_timeout of 20ms: %v", err)
	}
	if _, err := s.Pool().Exec(ctx, "SELECT pg_sleep(0.1)"); err != nil {
		t.Fatalf("a 100 ms statement with the role's statement_timeout of 20ms: %v", err)
	}

	// The listener, idle on its session, outlives the role's
	// idle_session_timeout several times over: counted from the moment it
	// listens, however long connecting took.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var failures []error
	var listening sync.Once
	s.WatchResignations(wctx, func() {
		listening.Do(func() { time.AfterFunc(1500*time.Millisecond, stop) })
	}, func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	})
	if ctx.Err() != nil {
		t.Fatal("the resignation listener never listened")
	}
	if len(failures) > 0 {
		t.Fatalf("the resignation listener failed %d times in 1.5 s with the role's idle_session_timeout of 300ms; first: %v", len(failures), failures[0])
	}
}

// A connection pooler in front of PostgreSQL (PgBouncer) refuses a startup
// parameter it does not know with "unsupported startup parameter" (SQLSTATE
// 08P01), unless listed in its ignore_startup_parameters, and then the
// setting is silently lost. A clustered node sent
// idle_in_transaction_session_timeout and tcp_keepalives_* that way, and
// could not connect through PgBouncer at all (it waited at start, saying it
// could not reach the database). It sets them once connected; only the
// url's own parameters and application_name go with the startup.
func TestClusteredSessionsPassAPoolerThatRefusesUnknownStartupParameters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schemaURL := pgtest.NewSchema(t)
	u, err := url.Parse(schemaURL)
	if err != nil {
		t.Fatal(err)
	}
	// search_path is the test url's own; PgBouncer knows application_name.
	proxy := startupRefusingProxy(t, u.Host, "user", "database", "search_path", "application_name")
	u.Host = proxy
	s, err := postgres.Open(ctx, postgres.Options{URL: u.String(), PoolSize: 2, IdleInTransactionTimeout: 2 * time.Second, ApplicationName: "mf test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate through a pooler that refuses unknown startup parameters: %v", err)
	}
	var timeout, keepalive string
	if err := s.Pool().QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('tcp_keepalives_count')").Scan(&timeout, &keepalive); err != nil {
		t.Fatal(err)
	}
	if timeout != "2s" || keepalive != "3" {
		t.Fatalf("idle_in_transaction_session_timeout %s, tcp_keepalives_count %s; want 2s and 3, set once connected", timeout, keepalive)
	}
}

// startupRefusingProxy listens on the loopback and relays each connection
// to server, as a pooler does, but first answers a startup message that
// carries a parameter outside allowed as PgBouncer does: "unsupported
// startup parameter" (SQLSTATE 08P01), and closes. It returns its address.
func startupRefusingProxy(t *testing.T, server string, allowed ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(c, server, ok)
		}
	}()
	return ln.Addr().String()
}

func relay(c net.Conn, server string, allowed map[string]bool) {
	defer c.Close()
	be := pgproto3.NewBackend(c, c)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	if _, isSSL := msg.(*pgproto3.SSLRequest); isSSL {
		if _, err := c.Write([]byte("N")); err != nil {
			return
		}
		if msg, err = be.ReceiveStartupMessage(); err != nil {
			return
		}
	}
	sm, isStartup := msg.(*pgproto3.StartupMessage)
	if !isStartup {
		return
	}
	for k := range sm.Parameters {
		if !allowed[k] {
			be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "08P01", Message: "unsupported startup parameter: " + k})
			_ = be.Flush()
			return
		}
	}
	up, err := net.Dial("tcp", server)
	if err != nil {
		return
	}
	defer up.Close()
	buf, err := sm.Encode(nil)
	if err != nil {
		return
	}
	if _, err := up.Write(buf); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// A DBA's default_transaction_isolation = serializable for mf's role made
// mf's concurrent writes fail to serialise (SQLSTATE 40001): seen live, 49
// of 2,000 messages answered AE and lanes retrying. mf's statements are
// written for read committed (the fence's lock on the lease row, each
// claim's own), and its sessions use it.
func TestSessionsReadCommittedWhateverTheirRoleSets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	roleURL := pgtest.NewRole(t, ctx, pgtest.NewSchema(t), "ALTER ROLE %ROLE SET default_transaction_isolation = 'serializable'")
	s, err := postgres.Open(ctx, postgres.Options{URL: roleURL, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got string
	if err := s.Pool().QueryRow(ctx, "SHOW transaction_isolation").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "read committed" {
		t.Fatalf("transaction_isolation %q with the role's default of serializable; want read committed", got)
	}
}

package sqlserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlserver"
)

// Against a real server (MF_TEST_SQLSERVER_URL), what contract_test.go
// checks with a fake driver: two single nodes on one database, the second
// refused, naming the first's session, until the first lets the lock go.
// Naming it needs VIEW SERVER STATE, which a login that creates the tests'
// databases has.
func TestASecondSingleNodeOnADatabaseIsRefusedByTheServer(t *testing.T) {
	server := serverURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := testDatabase(t, server, false)
	first := singleNodeStore(t, ctx, dbURL, "mf first")
	if _, err := first.HoldSingleNode(ctx); err != nil {
		t.Fatal(err)
	}
	second := singleNodeStore(t, ctx, dbURL, "mf second")
	_, err := second.HoldSingleNode(ctx)
	if !errors.Is(err, storage.ErrSingleNodeTaken) || !strings.Contains(err.Error(), `program_name "mf first"`) || !strings.Contains(err.Error(), "enable [cluster]") {
		t.Fatalf("a second single node: %v; want ErrSingleNodeTaken naming mf first's session", err)
	}
	// Another database is another store.
	if _, err := singleNodeStore(t, ctx, testDatabase(t, server, false), "mf elsewhere").HoldSingleNode(ctx); err != nil {
		t.Fatalf("a single node on another database: %v", err)
	}
	first.Close()
	until(t, ctx, "the second single node to take the lock once the first closed", func() bool {
		_, err := second.HoldSingleNode(ctx)
		return err == nil
	})
}

// Against a real server: the first single node's lock session is killed
// and, before it looks again, another process takes the lock; the first is
// told, and its writes are refused. KILL needs ALTER ANY CONNECTION.
func TestASingleNodeWhoseLockWasTakenMeanwhileStopsOnTheServer(t *testing.T) {
	server := serverURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := testDatabase(t, server, false)
	first := singleNodeStore(t, ctx, dbURL, "mf first")
	lost, err := first.HoldSingleNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := singleNodeStore(t, ctx, dbURL, "mf second")
	admin, err := sql.Open("sqlserver", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var spid int64
	if err := admin.QueryRowContext(ctx, "SELECT TOP (1) request_session_id FROM sys.dm_tran_locks WHERE resource_type = N'APPLICATION' AND request_owner_type = N'SESSION' AND resource_database_id = DB_ID()").Scan(&spid); err != nil {
		t.Fatalf("the first single node's lock session: %v", err)
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL %d", spid)); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the second single node to take the lock", func() bool {
		_, err := second.HoldSingleNode(ctx)
		return err == nil
	})
	select {
	case err := <-lost:
		if !errors.Is(err, storage.ErrSingleNodeTaken) {
			t.Fatalf("the first single node was told %v; want ErrSingleNodeTaken", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first single node was not told that another took its lock")
	}
	ingest := func(s *sqlserver.Store, id string) error {
		_, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{Inbound: "in", ControlID: id, Payload: []byte("MSH|"), Status: storage.MessageRouted}}})
		return err
	}
	if err := ingest(first, "C1"); !errors.Is(err, storage.ErrSingleNodeTaken) {
		t.Fatalf("an ingest of the first single node after it lost its lock: %v; want refused", err)
	}
	if err := ingest(second, "C2"); err != nil {
		t.Fatalf("an ingest of the second: %v", err)
	}
}

// singleNodeStore opens a migrated store on dbURL as a single node's, its
// sessions named name.
func singleNodeStore(t *testing.T, ctx context.Context, dbURL, name string) *sqlserver.Store {
	t.Helper()
	s, err := sqlserver.Open(ctx, sqlserver.Options{URL: dbURL, PoolSize: 2, ApplicationName: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

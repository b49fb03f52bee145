package sqlserver_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/microsoft/go-mssqldb" // the "sqlserver" driver, for the admin connection

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlserver"
	"github.com/messagefoundry/mf/storage/storagetest"
)

// urlEnv names the server the tests run against, e.g.
// sqlserver://sa:secret@127.0.0.1:1433?encrypt=disable. The login must be
// able to create and drop databases: each test gets its own.
const urlEnv = "MF_TEST_SQLSERVER_URL"

//go:embed testdata/*.sql
var testSQL embed.FS

var adminQueries = storage.MustLoadQueries(testSQL, "testdata")

func serverURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		tb.Skip(urlEnv + " is not set: the SQL Server dialect is tested only against a real server, and CI has none")
	}
	return u
}

// TestConformanceSQLServer runs the suite twice: the claim, the fence and the
// purge must be right whether plain reads lock (READ_COMMITTED_SNAPSHOT OFF,
// SQL Server's default) or read row versions (ON, Azure SQL's default).
func TestConformanceSQLServer(t *testing.T) {
	server := serverURL(t)
	t.Run("ReadCommittedLocking", func(t *testing.T) { storagetest.Run(t, opener(server, false)) })
	t.Run("ReadCommittedSnapshot", func(t *testing.T) { storagetest.Run(t, opener(server, true)) })
}

func BenchmarkSQLServer(b *testing.B) {
	storagetest.Bench(b, opener(serverURL(b), false))
}

// opener gives each test a database of its own on the server (testDatabase)
// and opens handles onto it.
func opener(server string, snapshot bool) storagetest.Opener {
	return func(t testing.TB) func() storage.Store {
		t.Helper()
		dbURL := testDatabase(t, server, snapshot)
		return func() storage.Store {
			t.Helper()
			return openStore(t, dbURL)
		}
	}
}

// testDatabase creates a database of the test's own on the server,
// mf_t_<random>, with READ_COMMITTED_SNAPSHOT on or off, drops it when the
// test ends, and returns its URL.
func testDatabase(t testing.TB, server string, snapshot bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := sql.Open("sqlserver", server)
	if err != nil {
		t.Fatalf("open %s: %v", urlEnv, err)
	}
	name := "mf_t_" + randomHex(t, 8)
	if _, err := admin.ExecContext(ctx, adminQueries.Get("create_database"),
		sql.Named("name", name), sql.Named("snapshot", snapshot)); err != nil {
		admin.Close()
		t.Fatalf("create test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// Registered first, so it runs after every handle is closed.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := admin.ExecContext(ctx, adminQueries.Get("drop_database"), sql.Named("name", name)); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
		admin.Close()
	})
	dbURL, err := withDatabase(server, name)
	if err != nil {
		t.Fatalf("%s: %v", urlEnv, err)
	}
	return dbURL
}

func openStore(t testing.TB, dbURL string) *sqlserver.Store {
	t.Helper()
	s, err := sqlserver.Open(context.Background(), sqlserver.Options{URL: dbURL})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestWritesThatReturnRowsWorkUnderATrigger: SQL Server refuses a bare OUTPUT
// clause on a table with an enabled trigger (error 334), so an operator's
// audit trigger on the lease or config table would stop every renewal (and
// the leader would fence itself) or every reload. Each such write outputs
// INTO a table variable instead. The trigger also runs a statement of its
// own, so the writes that read @@ROWCOUNT (the claim, the completion) show
// whether they read their own statement's count.
func TestWritesThatReturnRowsWorkUnderATrigger(t *testing.T) {
	dbURL := testDatabase(t, serverURL(t), false)
	s := openStore(t, dbURL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	db, err := sql.Open("sqlserver", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, table := range []string{"mf_leader_lease", "mf_config", "mf_messages", "mf_queue"} {
		if _, err := db.ExecContext(ctx, "CREATE TRIGGER "+table+"_audit ON "+table+
			" AFTER INSERT, UPDATE, DELETE AS SET NOCOUNT ON; DECLARE @n INT; SELECT @n = COUNT(*) FROM sys.objects;"); err != nil {
			t.Fatalf("create trigger on %s: %v", table, err)
		}
	}
	lease, elected, err := s.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "a", TTL: 30 * time.Second})
	if err != nil || !elected {
		t.Fatalf("elect under a trigger: elected %v, %v", elected, err)
	}
	renewed, err := s.LeaseAttemptRenew(ctx, storage.LeaseAttemptRenewParams{Owner: "a", Term: lease.Term, TTL: 30 * time.Second})
	if err != nil || renewed.Term != lease.Term || renewed.Owner != "a" {
		t.Fatalf("renew under a trigger: %+v, %v", renewed, err)
	}
	for want := int64(1); want <= 2; want++ {
		v, err := s.ConfigVersionBump(ctx, storage.ConfigVersionBumpParams{Name: "config"})
		if err != nil || v != want {
			t.Fatalf("config version bump %d under a trigger: %d, %v", want, v, err)
		}
	}
	fence := storage.Fence{Owner: "a", Term: lease.Term}
	if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Fence: fence, Messages: []storage.NewMessage{{
		Inbound: "in", ControlID: "1", MessageType: "ADT^A01", Payload: []byte("MSH|^~\\&|"), Status: storage.MessageRouted,
		Deliveries: []storage.Delivery{{Destination: "out", Lane: "out/p1"}},
	}}}); err != nil {
		t.Fatalf("ingest under a trigger: %v", err)
	}
	claim, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: fence, Lane: "out/p1", Owner: "a", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatalf("claim under a trigger: %v", err)
	}
	if err := s.QueueComplete(ctx, storage.QueueCompleteParams{Fence: fence, Claim: claim.Claim()}); err != nil {
		t.Fatalf("complete under a trigger: %v", err)
	}
	if err := s.QueueComplete(ctx, storage.QueueCompleteParams{Fence: fence, Claim: claim.Claim()}); !errors.Is(err, storage.ErrClaimLost) {
		t.Fatalf("second completion of one claim under a trigger: %v, want ErrClaimLost", err)
	}
}

// withDatabase returns the connection string dsn pointed at database db, in
// any of go-mssqldb's three forms.
func withDatabase(dsn, db string) (string, error) {
	lower := strings.ToLower(dsn)
	switch {
	case strings.HasPrefix(lower, "sqlserver://"):
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		q := u.Query()
		for k := range q {
			if strings.EqualFold(k, "database") {
				q.Del(k)
			}
		}
		q.Set("database", db)
		u.RawQuery = q.Encode()
		return u.String(), nil
	case strings.HasPrefix(lower, "odbc:"):
		return strings.TrimRight(dsn, ";") + ";database={" + db + "}", nil
	default: // ADO: key=value;... where a later key wins
		return strings.TrimRight(dsn, ";") + ";database=" + db, nil
	}
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// DelayedDurability reads what mf run warns about at start: a database
// that forces delayed durability acknowledges commits before they are on
// disk. Run only against a real server (MF_TEST_SQLSERVER_URL).
func TestDelayedDurabilityIsRead(t *testing.T) {
	dbURL := testDatabase(t, serverURL(t), false)
	s := openStore(t, dbURL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("sqlserver", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, want := range []string{"DISABLED", "FORCED"} {
		// ALTER DATABASE takes no parameters; the name is the test's own.
		if _, err := db.ExecContext(ctx, "DECLARE @sql NVARCHAR(MAX) = N'ALTER DATABASE ' + QUOTENAME(DB_NAME()) + N' SET DELAYED_DURABILITY = "+want+"'; EXEC (@sql);"); err != nil {
			t.Fatalf("set DELAYED_DURABILITY = %s: %v", want, err)
		}
		if got, err := s.DelayedDurability(ctx); err != nil || got != want {
			t.Errorf("DelayedDurability() = %q, %v; want %q", got, err, want)
		}
	}
}

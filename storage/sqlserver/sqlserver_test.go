package sqlserver_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
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

// opener gives each test a database of its own on the server, mf_t_<random>,
// with READ_COMMITTED_SNAPSHOT on or off, dropped when the test ends, and
// opens handles onto it.
func opener(server string, snapshot bool) storagetest.Opener {
	return func(t testing.TB) func() storage.Store {
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
		return func() storage.Store {
			t.Helper()
			s, err := sqlserver.Open(context.Background(), sqlserver.Options{URL: dbURL})
			if err != nil {
				t.Fatalf("open store on %s: %v", name, err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
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

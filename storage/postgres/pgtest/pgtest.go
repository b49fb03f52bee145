// Package pgtest gives tests their own PostgreSQL schema on the server named
// by MF_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres).
//
// A test that cannot reach the server is skipped with the reason, except when
// CI=true: then it fails, so that CI can never pass by skipping.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is used when MF_TEST_POSTGRES_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// BaseURL returns the server URL tests use.
func BaseURL() string {
	if u := os.Getenv("MF_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// unavailable skips the test, or fails it under CI=true.
func unavailable(t testing.TB, err error) {
	t.Helper()
	msg := fmt.Sprintf("PostgreSQL at MF_TEST_POSTGRES_URL (%s) is unreachable: %v", redact(BaseURL()), err)
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s (CI=true: PostgreSQL is required)", msg)
	}
	t.Skipf("%s; set MF_TEST_POSTGRES_URL or start PostgreSQL (CI=true makes this a failure)", msg)
}

// NewSchema creates an empty schema for this test, drops it (with all it
// holds) when the test ends, and returns the server URL with search_path set
// to it, so that every connection opened with the URL works inside it.
func NewSchema(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, BaseURL())
	if err != nil {
		unavailable(t, err)
	}
	defer conn.Close(ctx)

	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "mf_t_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("pgtest: create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, BaseURL())
		if err != nil {
			t.Logf("pgtest: drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("pgtest: drop schema %s: %v", schema, err)
		}
	})

	u, err := url.Parse(BaseURL())
	if err != nil {
		t.Fatalf("pgtest: MF_TEST_POSTGRES_URL must be a postgres:// URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// NewRole creates a login role for t that may use and create in the schema
// of schemaURL, runs each of statements as the server's admin, as a DBA
// would (%ROLE stands for the role, %SCHEMA for the schema: "ALTER ROLE
// %ROLE SET statement_timeout = '20ms'", "GRANT ... ON ALL TABLES IN
// SCHEMA %SCHEMA TO %ROLE"), and returns schemaURL as that role. The role,
// its sessions and what it owns go when t ends, before the schema does.
func NewRole(t *testing.T, ctx context.Context, schemaURL string, statements ...string) string {
	t.Helper()
	u, err := url.Parse(schemaURL)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "mf_role_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	t.Cleanup(func() { // before the schema's drop (cleanups run last first)
		c, err := pgx.Connect(context.Background(), BaseURL())
		if err != nil {
			t.Logf("drop role %s: %v", role, err)
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		for _, q := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := c.Exec(context.Background(), q); err != nil {
				t.Logf("%s: %v", q, err)
			}
		}
	})
	for _, q := range append([]string{"CREATE ROLE %ROLE LOGIN", "GRANT USAGE, CREATE ON SCHEMA %SCHEMA TO %ROLE"}, statements...) {
		q = strings.NewReplacer("%ROLE", role, "%SCHEMA", schema).Replace(q)
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	u.User = url.User(role)
	return u.String()
}

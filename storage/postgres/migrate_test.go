package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A node may run as a role that can read and write mf's tables but not
// change the schema, once a role that can has migrated it (mf migrate): its
// Migrate at start then finds nothing to do and changes nothing. While a
// migration is pending, that role's Migrate fails and says what to do.
func TestMigrateByARoleThatCannotCreateOnceMigrated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ownerURL := pgtest.NewSchema(t)
	u, err := url.Parse(ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "mf_dml_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	exec := func(q string) {
		t.Helper()
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE ROLE " + role + " LOGIN")
	t.Cleanup(func() { // before the schema's drop (cleanups run last first)
		c, err := pgx.Connect(context.Background(), pgtest.BaseURL())
		if err != nil {
			t.Logf("drop role %s: %v", role, err)
			return
		}
		defer c.Close(context.Background())
		for _, q := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := c.Exec(context.Background(), q); err != nil {
				t.Logf("%s: %v", q, err)
			}
		}
	})
	exec("GRANT USAGE ON SCHEMA " + schema + " TO " + role)
	exec("ALTER DEFAULT PRIVILEGES IN SCHEMA " + schema + " GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO " + role)
	exec("ALTER DEFAULT PRIVILEGES IN SCHEMA " + schema + " GRANT USAGE, SELECT ON SEQUENCES TO " + role)

	u.User = url.User(role)
	dml, err := postgres.Open(ctx, postgres.Options{URL: u.String(), PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer dml.Close()

	// Nothing migrated yet: the role cannot, and the error says what to do.
	err = dml.Migrate(ctx)
	if err == nil || !strings.Contains(err.Error(), "mf migrate") {
		t.Fatalf("migrate of an empty schema by a role that cannot create: %v; want an error that names mf migrate", err)
	}

	owner, err := postgres.Open(ctx, postgres.Options{URL: ownerURL, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if err := owner.Migrate(ctx); err != nil {
		t.Fatalf("migrate by the schema's owner: %v", err)
	}

	if err := dml.Migrate(ctx); err != nil {
		t.Fatalf("migrate of a migrated schema by a role that cannot create: %v", err)
	}
	if err := dml.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := dml.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
		Inbound: "in", Payload: []byte("MSH|"), Status: storage.MessageRouted,
		Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/1"}},
	}}})
	if err != nil || len(res) != 1 {
		t.Fatalf("ingest by the role: %v, %v", res, err)
	}
	if _, err := dml.MessageRead(ctx, res[0].MessageID); errors.Is(err, storage.ErrNotFound) || err != nil {
		t.Fatalf("read by the role: %v", err)
	}
}

// A store url whose search_path names no schema that exists fails to migrate
// with an error that says so: PostgreSQL's own says only that no schema has
// been selected to create in.
func TestMigrateIntoASchemaThatDoesNotExistSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := url.Parse(pgtest.NewSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", q.Get("search_path")+"_missing")
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, postgres.Options{URL: u.String(), PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "search_path") {
		t.Fatalf("migrate into a schema that does not exist: %v; want an error naming search_path", err)
	}
}

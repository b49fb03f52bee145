package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A node whose role's CONNECTION LIMIT is below the sessions it opens
// (pool_size, the lease's and the resignation listener's) started without a
// word, and then, under load, its pool's new sessions were refused (SQLSTATE
// 53300): messages answered AE now and then, lanes retrying. It warns at
// start, naming the limit and pool_size.
func TestANodeWarnsWhenItsRoleMayNotOpenItsSessions(t *testing.T) {
	t.Parallel()
	c := newCluster(t, fast)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	roleURL := pgtest.NewRole(t, ctx, c.url,
		"ALTER ROLE %ROLE CONNECTION LIMIT 5", // a node with pool_size 4 opens 6
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %SCHEMA TO %ROLE",
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %SCHEMA TO %ROLE")
	e := c.addNode(roleURL)
	waitFor(t, "a warning that names the role's CONNECTION LIMIT and pool_size", 30*time.Second, func() bool {
		e.checkAlive()
		for _, l := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "CONNECTION LIMIT 5 of role") && strings.Contains(l, "pool_size 4") {
				return true
			}
		}
		return false
	})
}

// scratchDatabase creates a database of its own on the test server (a
// pooler passes no search_path, so a schema of a shared database will not
// do), migrated, and drops it when t ends. It returns its URL and a store
// on it, closed when t ends.
func scratchDatabase(t *testing.T) (string, *postgres.Store) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "mf_pgb_" + hex.EncodeToString(b[:])
	do := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pgtest.BaseURL())
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := do("CREATE DATABASE " + name); err != nil {
		pgtest.NewSchema(t) // skips, or fails under CI, when the server is away
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := do("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	admin, err := postgres.Open(context.Background(), postgres.Options{URL: u.String(), PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() }) // before the drop (cleanups run last first)
	if err := admin.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return u.String(), admin
}

// A node started while its database is read-only, with a store url that
// asks for a writable one (target_session_attrs=read-write: a managed
// database failing over, the new primary not yet promoted) waits for it as
// for a database that does not answer, and becomes primary once the
// database is writable. It exited 1 at once ("ValidateConnect failed: read
// only connection"), leaving it to its service manager, whose restarts run
// out (systemd's, 5 in 10 s) before a failover has ended.
func TestANodeWaitsForAWritableDatabaseAtStart(t *testing.T) {
	t.Parallel()
	direct, admin := scratchDatabase(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	setReadOnly := func(on bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pgtest.BaseURL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		q := "ALTER DATABASE " + db + " RESET default_transaction_read_only"
		if on {
			q = "ALTER DATABASE " + db + " SET default_transaction_read_only = on"
		}
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	setReadOnly(true)
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	c := &cluster{t: t, url: direct, timing: fast, dest: startReceiver(t, ""), admin: admin}
	e := c.addNode(u.String())
	waitFor(t, "a warning that the node waits for its database", 30*time.Second, func() bool {
		e.checkAlive()
		return hasWarning(e, "cannot reach the database")
	})
	setReadOnly(false)
	if p := c.waitForPrimary(-1); p != 0 {
		t.Fatalf("node-%d is primary; want node-0", p)
	}
}

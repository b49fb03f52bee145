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
	u, err := url.Parse(c.url)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "mf_limited_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	t.Cleanup(func() { // before the schema's drop (cleanups run last first)
		c, err := pgx.Connect(context.Background(), pgtest.BaseURL())
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
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN CONNECTION LIMIT 5", // a node with pool_size 4 opens 6
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	u.User = url.User(role)
	e := c.addNode(u.String())
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

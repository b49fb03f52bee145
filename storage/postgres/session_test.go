package postgres

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// tcp_user_timeout is set only on a server that has it (PostgreSQL 12 and
// later): on an older one, which knows no such setting, the statement sets
// nothing and succeeds. The server here is newer, so "older" is a minimum
// version above its own; that the setting then stays 0 shows set_config was
// never evaluated, which is what an older server needs.
func TestTCPUserTimeoutIsSetOnlyOnAServerThatHasIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		name  string
		since int
		want  string
	}{
		{"12 or later", tcpUserTimeoutSince, "5000"},
		{"older", 9_990_000, "0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := pgconn.Connect(ctx, pgtest.NewSchema(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if err := setTCPUserTimeout(ctx, conn, 5000, c.since); err != nil {
				t.Fatalf("set tcp_user_timeout on a server %s: %v", c.name, err)
			}
			res := conn.ExecParams(ctx, "SHOW tcp_user_timeout", nil, nil, nil, nil).Read()
			if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) != c.want {
				t.Fatalf("tcp_user_timeout on a server %s: %v, %v; want %s", c.name, res.Rows, res.Err, c.want)
			}
		})
	}
}

// synchronous_commit = off, set for mf's role, its database, the server or
// in the store url, has PostgreSQL acknowledge a commit before it is on
// disk, and mf would answer AA for messages a crash of the server loses.
// Every session mf opens commits durably whatever was set; a durable value
// is left as the DBA chose it; an override is said once, at WARN.
func TestSessionsCommitDurablyWhateverTheirRoleSets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct{ set, want string }{
		{"off", "on"},
		{"remote_write", "remote_write"},
		{"local", "local"},
	} {
		t.Run(c.set, func(t *testing.T) {
			u, err := url.Parse(pgtest.NewSchema(t))
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("synchronous_commit", c.set) // a runtime parameter of the session, as a role's setting would be
			u.RawQuery = q.Encode()
			var logs bytes.Buffer
			s, err := Open(ctx, Options{URL: u.String(), PoolSize: 2, Log: zerolog.New(&logs)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range 2 { // two sessions: each is set, the WARN is said once
				conn, err := s.pool.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Release()
				var got string
				if err := conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != c.want {
					t.Errorf("session %d: synchronous_commit = %s with %s set; want %s", i, got, c.set, c.want)
				}
			}
			if n, want := strings.Count(logs.String(), "synchronous_commit is off"), map[bool]int{true: 1, false: 0}[c.set == "off"]; n != want {
				t.Errorf("%d WARN lines about synchronous_commit; want %d:\n%s", n, want, logs.String())
			}
		})
	}
}

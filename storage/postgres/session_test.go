package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

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

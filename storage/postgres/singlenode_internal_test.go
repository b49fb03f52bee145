package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A single node whose lock session dropped on its side while the server
// still shows it (a network gone a moment: the server learns of it only
// from keepalive) finds its own previous session holding the lock: it ends
// that session and takes the lock again. It took it for another process's
// and stopped, and, restarted, was refused until the server dropped the
// session. A session not its own still refuses it. The lock session's
// server drops it within seconds of its client going silent.
func TestASingleNodeTakesItsLockBackFromItsOwnPreviousSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewSchema(t)
	s, err := Open(ctx, Options{URL: url, PoolSize: 2, ApplicationName: "mf single"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old, err := pgx.Connect(ctx, url) // the previous session, as the server still shows it
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(context.Background())
	var took bool
	var prev lockSession
	if err := old.QueryRow(ctx, queries.Get("single_node_lock")).Scan(&took, &prev.pid, &prev.start); err != nil || !took {
		t.Fatalf("the old session's lock: %v %v", took, err)
	}
	// Known by its pid and start: the pid alone may be a pooler's, or
	// the server's given again to another session since.
	for _, other := range []lockSession{{pid: prev.pid + 1, start: prev.start}, {pid: prev.pid, start: prev.start.Add(-time.Second)}} {
		if _, _, err := s.takeSingleNode(ctx, other); !errors.Is(err, ErrSingleNodeTaken) {
			t.Fatalf("with a session other than %+v holding the lock: %v; want ErrSingleNodeTaken", other, err)
		}
	}
	conn, own, err := s.takeSingleNode(ctx, prev)
	if err != nil || own.pid == prev.pid {
		t.Fatalf("with its own previous session holding the lock: %v; want it taken back", err)
	}
	defer conn.Close(context.Background())
	for param, want := range map[string]string{"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2", "tcp_keepalives_count": "3", "tcp_user_timeout": "11000"} {
		var got string
		if err := conn.QueryRow(ctx, "SHOW "+param).Scan(&got); err != nil || got != want {
			t.Errorf("the lock session's %s = %s (%v); want %s", param, got, err, want)
		}
	}
}

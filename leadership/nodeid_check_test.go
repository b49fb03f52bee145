package leadership_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A pinned node_id whose row another process on this host wrote moments
// ago: if that process is gone, it was a run of this node that crashed
// (kill -9, then systemd's restart), and the node starts at once; if it is
// alive, it may be a running node with the same id, and the node waits to
// see whether it beats again. It waited in both cases, up to
// node_timeout_seconds (30 s by default), after every crash.
func TestACrashedRunOfThisNodeOnThisHostIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	st := openStore(t, pgtest.NewSchema(t))
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	alive := exec.Command("sleep", "60")
	if err := alive.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alive.Process.Kill(); alive.Wait() })
	cl := config.Cluster{HeartbeatSeconds: 10, NodeTimeoutSeconds: 30}
	for _, tc := range []struct {
		id   string
		pid  int
		want bool // starts at once
	}{
		{"crashed", gone.Process.Pid, true},
		{"alive", alive.Process.Pid, false},
	} {
		if err := st.NodeHeartbeat(context.Background(), storage.NodeHeartbeatParams{NodeID: tc.id, Host: host, PID: int64(tc.pid), Started: true}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := leadership.CheckNodeIDFree(ctx, st, cl, tc.id, zerolog.Nop())
		cancel()
		if started := err == nil; started != tc.want {
			t.Errorf("node_id %q last written by pid %d of this host (%s): CheckNodeIDFree within 2s = %v; want it to start at once: %v", tc.id, tc.pid, tc.id, err, tc.want)
		}
	}
}

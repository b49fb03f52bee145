package actors

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// A graph that panics more than 10 times in 10 s is stopped by root's
// supervisor. Root learned nothing of it: the node reported itself leader
// and held the lease with no listener and no lane running. It now stops the
// node (Engine.Failed), which is no longer leader.
func TestAGraphThatPanicsTooOftenStopsTheEngine(t *testing.T) {
	graphStarted = func() { panic("injected: a bug in starting the graph") }
	t.Cleanup(func() { graphStarted = nil })
	cfg, err := config.Parse([]byte(""), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	eng, err := Start(Options{Config: cfg, Store: st, Log: zerolog.New(logs), NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := eng.Stop(ctx); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	select {
	case err := <-eng.Failed():
		if !strings.Contains(err.Error(), "graph") {
			t.Fatalf("the engine failed with %v; want an error naming the graph", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the engine did not report that its graph was stopped within 10s (status %+v)", eng.Status())
	}
	if s := eng.Status(); s.Leader {
		t.Fatalf("status after the graph was stopped: %+v; want not leader", s)
	}
	if !strings.Contains(logs.String(), `"level":"error","term":0,"message":"the graph panicked too often`) {
		t.Fatalf("no ERROR saying that the graph was stopped:\n%s", logs.String())
	}
}

package actors

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
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
	eng, logs := startSingleNode(t)
	wantFailedOverItsGraph(t, eng, logs)
	if !strings.Contains(logs.String(), `"level":"error","term":0,"message":"the graph panicked too often`) {
		t.Fatalf("no ERROR saying that the graph was stopped:\n%s", logs.String())
	}
}

// A graph that cannot be spawned (only a bug can cause it) left the node
// leader with no listener and no lane, holding the lease so that no standby
// could take over, after one ERROR line. It now gives up the lease and stops
// the node (Engine.Failed), as a graph that panicked too often does.
func TestAGraphThatCannotBeStartedStopsTheEngine(t *testing.T) {
	spawn := spawnGraph
	spawnGraph = func(actor.Context, *actor.Props, string) (*actor.PID, error) {
		return nil, errors.New("injected: the name is taken")
	}
	t.Cleanup(func() { spawnGraph = spawn })
	eng, logs := startSingleNode(t)
	wantFailedOverItsGraph(t, eng, logs)
}

// wantFailedOverItsGraph waits for eng to report (Engine.Failed) that it
// stopped over its graph, and checks that it no longer leads.
func wantFailedOverItsGraph(t *testing.T, eng *Engine, logs *logbuf.Buffer) {
	t.Helper()
	select {
	case err := <-eng.Failed():
		if !strings.Contains(err.Error(), "graph") {
			t.Fatalf("the engine failed with %v; want an error naming the graph", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the engine did not report within 10s that it stopped over its graph (status %+v):\n%s", eng.Status(), logs.String())
	}
	if s := eng.Status(); s.Leader {
		t.Fatalf("status after the engine stopped over its graph: %+v; want not leader", s)
	}
}

// startSingleNode starts an engine of the built-in single-node kind on a
// fresh SQLite store, stopped when the test ends (its logs shown if the test
// failed).
func startSingleNode(t *testing.T) (*Engine, *logbuf.Buffer) {
	t.Helper()
	cfg, err := config.Parse([]byte(""), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	eng, err := Start(Options{Config: cfg, Store: st, Log: zerolog.New(logs), NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := eng.Stop(ctx); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	return eng, logs
}

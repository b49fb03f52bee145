package actors

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/listeners"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// hungPoll stands in for a file inbound whose poll is stuck in a file-system
// call that does not return (os.Lstat on a hard-mounted NFS share whose
// server is gone): its first poll blocks the actor's goroutine until the
// test releases it, and it answers neither Drain nor its stop meanwhile.
type hungPoll struct {
	stuck   func()
	release <-chan struct{}
}

type hungPollNow struct{}

func (h *hungPoll) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		ctx.Send(ctx.Self(), hungPollNow{})
	case hungPollNow:
		h.stuck()
		<-h.release
	}
}

// leadStandIn is the leadership actor of a test that tells root what to do:
// it passes Changed and ConfigChanged on, and closes stopped when root stops
// it (the elector's stop resigns the lease).
type leadStandIn struct {
	hello   chan<- *actor.PID
	stopped chan<- struct{}
}

func (l *leadStandIn) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		l.hello <- ctx.Self()
	case leadership.Changed, leadership.ConfigChanged:
		ctx.Send(ctx.Parent(), m)
	case *actor.Stopping:
		close(l.stopped)
	}
}

// stuckLeader is an engine leading (term 0, its leadership actor a
// stand-in) with an MLLP inbound and a file inbound whose first poll is
// stuck in a call that does not return until the test ends.
type stuckLeader struct {
	eng    *Engine
	lead   *actor.PID
	logs   *logbuf.Buffer
	listen string
	dir    string // the file inbound's
	// stopped is closed when root stops the leadership actor.
	stopped <-chan struct{}
	// stoppedByTest: the test has stopped the engine itself.
	stoppedByTest bool
}

// startStuckLeader starts a stuckLeader and waits until its file inbound is
// stuck. Its graph's stop is given up 500 ms (the drain timeout) and 2 s
// (stopGraphGrace) after it begins.
func startStuckLeader(t *testing.T) *stuckLeader {
	t.Helper()
	grace, drainListener, poller := stopGraphGrace, drainListenerTimeout, newFilePoller
	stopGraphGrace, drainListenerTimeout = 2*time.Second, 200*time.Millisecond
	stuck, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	newFilePoller = func(*listeners.Env, config.Inbound) *actor.Props {
		return actor.PropsFromProducer(func() actor.Actor {
			return &hungPoll{stuck: func() { once.Do(func() { close(stuck) }) }, release: release}
		})
	}
	t.Cleanup(func() { stopGraphGrace, drainListenerTimeout, newFilePoller = grace, drainListener, poller })

	listen, dir := freeAddr(t), t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = %q

[[inbound]]
name = "drop"
type = "file"
directory = %q

[[outbound]]
name = "out"
type = "file"
directory = %q

[[route]]
from = "adt_in"
to = ["out"]

[[route]]
from = "drop"
to = ["out"]
`, listen, filepath.Join(dir, "in"), filepath.Join(dir, "out"))), "test.toml")
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
	hello, stopped := make(chan *actor.PID, 1), make(chan struct{})
	n := &stuckLeader{logs: &logbuf.Buffer{}, listen: listen, dir: filepath.Join(dir, "in"), stopped: stopped}
	n.eng, err = Start(Options{
		Config: cfg, Store: st, Log: zerolog.New(n.logs), NodeID: "n1",
		Leadership:   actor.PropsFromProducer(func() actor.Actor { return &leadStandIn{hello: hello, stopped: stopped} }),
		Trust:        leadership.AlwaysTrusted(),
		Reload:       func() (*config.Config, error) { return cfg, nil },
		DrainTimeout: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !n.stoppedByTest {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := n.eng.Stop(ctx); err != nil {
				t.Error(err)
			}
		}
		if t.Failed() {
			t.Log(n.logs.String())
		}
	})
	t.Cleanup(func() { close(release) }) // first: the stuck call returns
	select {
	case n.lead = <-hello:
	case <-time.After(5 * time.Second):
		t.Fatal("root did not start the leadership actor")
	}
	n.eng.system.Root.Send(n.lead, leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	select {
	case <-stuck:
	case <-time.After(10 * time.Second):
		t.Fatal("the file inbound's poll never began")
	}
	waitFor(t, "the MLLP port to open", 5*time.Second, func() bool { return portOpen(listen) })
	return n
}

// wantGivenUp checks that root gave the graph up: err (Engine.Failed's)
// and an ERROR line name the file inbound that did not stop, and only it;
// the leadership actor has been stopped (the elector's stop resigns the
// lease); the node does not lead and its port is closed.
func (n *stuckLeader) wantGivenUp(t *testing.T, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), `file inbound "drop"`) {
		t.Fatalf("the engine failed with %v; want an error naming the file inbound that did not stop", err)
	}
	select {
	case <-n.stopped:
	default:
		t.Fatal("the engine failed with its leadership actor still running: the lease is renewed by a node that exits")
	}
	if s := n.eng.Status(); s.Leader {
		t.Fatalf("status after the failure: %+v; want not leader", s)
	}
	if portOpen(n.listen) {
		t.Fatal("the MLLP port is open after the failure")
	}
	var line string
	for _, l := range strings.Split(n.logs.String(), "\n") {
		if strings.Contains(l, `"level":"error"`) && strings.Contains(l, "the graph did not stop") {
			line = l
		}
	}
	if !strings.Contains(line, `"not_stopped":["file inbound \"drop\" (directory `+n.dir) {
		t.Fatalf("no ERROR naming the file inbound that did not stop, and its directory: %q", line)
	}
	if strings.Contains(line, "MLLP inbound") {
		t.Fatalf("the ERROR names the MLLP inbound, which stopped: %q", line)
	}
}

// stop stops the engine, the file inbound still stuck, and checks that the
// stop ends: protoactor's stop of the root actor gives up after 10 s.
func (n *stuckLeader) stop(t *testing.T, within time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	began := time.Now()
	n.stoppedByTest = true
	err := n.eng.Stop(ctx)
	if took := time.Since(began); took >= within {
		t.Fatalf("Engine.Stop took %v with the file inbound stuck (err %v)", took.Round(time.Millisecond), err)
	}
	return err
}

// A leader whose file inbound is stuck in a file-system call that never
// returns is told to reload. Root waited for the old graph to stop without
// end (after the drain timeout it cancelled the term and waited again, with
// no bound): the ports were closed, the elector went on renewing the lease,
// and no node of the cluster accepted messages until someone killed the
// process. Now root gives the graph up stopGraphGrace after the cancel: it
// logs at ERROR what did not stop, stops the leadership actor (which
// resigns the lease) and fails the engine (mf run exits non-zero). A later
// leadership change starts no graph, and the engine's stop ends with the
// call still stuck.
func TestAGraphStuckInAFileSystemCallFailsTheNode(t *testing.T) {
	n := startStuckLeader(t)
	n.eng.system.Root.Send(n.lead, leadership.ConfigChanged{Version: 2})
	select {
	case err := <-n.eng.Failed():
		n.wantGivenUp(t, err)
	case <-time.After(15 * time.Second):
		t.Fatalf("the engine did not fail within 15 s of a reload whose old graph cannot stop (drain timeout 500ms, grace %v): root waits for the stuck file inbound for ever, the ports closed and the lease kept (status %+v)", stopGraphGrace, n.eng.Status())
	}
	// A gain told now (one queued before the elector stopped) starts
	// nothing, and the stop ends.
	n.eng.system.Root.Send(n.eng.root, leadership.Changed{Leader: true, Fence: storage.Fence{Term: 1}, Reason: "elected"})
	t.Logf("Engine.Stop with the file inbound still stuck: %v", n.stop(t, 20*time.Second))
	if c := strings.Count(n.logs.String(), "graph started"); c != 1 {
		t.Fatalf("a graph was started %d times; want once (none after the failure)", c)
	}
}

// The same stuck file inbound at a stop (SIGTERM: mf run's Engine.Stop,
// given the drain timeout and 30 s). Root waited for the graph until the
// stop's own deadline, and the node exited holding its lease, unresigned:
// the standbys waited for it to expire. Now the stop gives the graph up,
// resigns, and ends within the drain timeout, stopGraphGrace and the 10 s
// protoactor gives the root actor's stop.
func TestAStopWithAGraphStuckInAFileSystemCallResigns(t *testing.T) {
	n := startStuckLeader(t)
	err := n.stop(t, 500*time.Millisecond+30*time.Second)
	t.Logf("Engine.Stop with the file inbound still stuck: %v", err)
	select {
	case err := <-n.eng.Failed():
		n.wantGivenUp(t, err)
	default:
		t.Fatal("the engine's stop ended without giving its stuck graph up (Engine.Failed has nothing)")
	}
}

// portOpen says whether something accepts TCP connections at addr.
func portOpen(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

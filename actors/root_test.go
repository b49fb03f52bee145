package actors_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// scripted is a leadership actor played by the test: what the test sends it
// goes to root, and what root sends it is recorded.
type scripted struct {
	hello chan<- scriptedRef
	got   chan<- any
}

type scriptedRef struct {
	system *actor.ActorSystem
	pid    *actor.PID
}

func (s *scripted) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.hello <- scriptedRef{ctx.ActorSystem(), ctx.Self()}
	case leadership.Changed, leadership.ConfigChanged:
		ctx.Send(ctx.Parent(), m)
	case leadership.ConfigLoaded, leadership.Fenced:
		s.got <- m
	}
}

type harness struct {
	t      *testing.T
	eng    *actors.Engine
	store  *enginetest.FaultStore
	lead   scriptedRef
	got    chan any
	listen string
	logs   *enginetest.LogBuffer
}

func graphConfig(listen string) string {
	return fmt.Sprintf(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = %q

[[outbound]]
name = "out"
type = "file"
directory = "out"

[[route]]
from = "adt_in"
to = ["out"]
`, listen)
}

// migratedStore is a migrated SQLite store in the test's directory,
// closed when the test ends (after an engine stopped by a cleanup
// registered later).
func migratedStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// parsedGraphConfig is graphConfig(listen), its outbound writing to the
// test's directory.
func parsedGraphConfig(t *testing.T, listen string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(graphConfig(listen)), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Outbound {
		cfg.Outbound[i].Directory = filepath.Join(t.TempDir(), "out")
	}
	return cfg
}

func start(t *testing.T, reload func() (*config.Config, error)) *harness {
	t.Helper()
	h := &harness{t: t, got: make(chan any, 16), listen: enginetest.FreeAddr(t), logs: &enginetest.LogBuffer{}}
	cfg, st := parsedGraphConfig(t, h.listen), migratedStore(t)
	h.store = &enginetest.FaultStore{Store: st}
	hello := make(chan scriptedRef, 1)
	var err error
	h.eng, err = actors.Start(actors.Options{
		Config: cfg, Store: h.store, Log: zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), h.logs)), NodeID: "n1",
		Leadership: actor.PropsFromProducer(func() actor.Actor { return &scripted{hello: hello, got: h.got} }),
		Trust:      leadership.AlwaysTrusted(),
		Reload:     reload,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.eng.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	h.lead = <-hello
	return h
}

// scriptedEngine is an engine on a SQLite store of its own with a scripted
// leadership actor: tell makes that actor report m to root, got receives
// what root sends it.
type scriptedEngine struct {
	eng  *actors.Engine
	tell func(m any)
	got  chan any
	logs *enginetest.LogBuffer
}

// reload tells the engine the shared config is at version and waits for
// its confirmation (leadership.ConfigLoaded) to the leadership actor.
func (e *scriptedEngine) reload(t *testing.T, version int64) {
	t.Helper()
	e.tell(leadership.ConfigChanged{Version: version})
	select {
	case m := <-e.got:
		if m != (leadership.ConfigLoaded{Version: version}) {
			t.Fatalf("the leadership actor got %#v; want ConfigLoaded{%d}", m, version)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the reload to version %d was not confirmed", version)
	}
}

// startScripted starts an engine on cfg, with the options more adds (if
// not nil); it stops when the test ends, and shows its logs if the test
// failed.
func startScripted(t *testing.T, cfg *config.Config, more func(*actors.Options)) *scriptedEngine {
	t.Helper()
	st := migratedStore(t)
	e := &scriptedEngine{got: make(chan any, 16), logs: &enginetest.LogBuffer{}}
	hello := make(chan scriptedRef, 1)
	o := actors.Options{
		Config: cfg, Store: st, Log: zerolog.New(e.logs), NodeID: "n1",
		Leadership: actor.PropsFromProducer(func() actor.Actor { return &scripted{hello: hello, got: e.got} }),
		Trust:      leadership.AlwaysTrusted(),
	}
	if more != nil {
		more(&o)
	}
	var err error
	e.eng, err = actors.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(e.logs.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.eng.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	lead := <-hello
	e.tell = func(m any) { lead.system.Root.Send(lead.pid, m) }
	return e
}

// slowOutbound is a config with an MLLP inbound on listen routed to an HTTP
// destination at url whose sends may last 50 s, after head (the store and
// cluster sections, if any).
func slowOutbound(t *testing.T, head, listen, url string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(head+fmt.Sprintf(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = %q

[[outbound]]
name = "slow"
type = "http"
url = %q
timeout_seconds = 50

[[route]]
from = "adt_in"
to = ["slow"]
`, listen, url)), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// elect writes owner into the store's lease row, under the next term, as
// the election of a cluster node would (the holder, if any, resigns first),
// so that graph writes under the fence returned pass the store's check.
func (h *harness) elect(owner string) storage.Fence {
	h.t.Helper()
	bg := context.Background()
	if l, err := h.store.LeaseRead(bg); err == nil && l.Owner != "" {
		if _, err := h.store.LeaseResign(bg, storage.LeaseResignParams{Owner: l.Owner, Term: l.Term}); err != nil {
			h.t.Fatal(err)
		}
	}
	l, ok, err := h.store.LeaseAttemptElect(bg, storage.LeaseAttemptElectParams{Owner: owner, TTL: time.Hour})
	if err != nil || !ok {
		h.t.Fatalf("electing %s: elected %v, %v", owner, ok, err)
	}
	return storage.Fence{Owner: owner, Term: l.Term}
}

// tell makes the scripted leadership actor report m to root.
func (h *harness) tell(m any) { h.lead.system.Root.Send(h.lead.pid, m) }

func open(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// Root starts the graph when leadership is gained and stops it, closing the
// listener's port, when it is lost; again with the next term.
func TestGraphFollowsLeadership(t *testing.T) {
	h := start(t, nil)
	if open(h.listen) {
		t.Fatal("the port is open before this node leads")
	}
	for term := int64(1); term <= 2; term++ {
		f := h.elect("n1")
		if f.Term != term {
			t.Fatalf("elected into term %d, want %d", f.Term, term)
		}
		h.tell(leadership.Changed{Leader: true, Fence: f, Reason: "elected"})
		enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(h.listen) })
		if s := h.eng.Status(); !s.Leader || s.Fence != f || !s.Clustered {
			t.Fatalf("status while leading: %+v", s)
		}
		h.tell(leadership.Changed{Leader: false, Fence: f, Reason: "renew-lost"})
		enginetest.WaitFor(t, "the port to close", 5*time.Second, func() bool { return !open(h.listen) })
		if s := h.eng.Status(); s.Leader {
			t.Fatalf("status after the loss: %+v", s)
		}
	}
}

// A fenced write stops the graph and tells the leadership actor.
func TestFencedWriteStopsTheGraph(t *testing.T) {
	h := start(t, nil)
	h.tell(leadership.Changed{Leader: true, Fence: h.elect("n1"), Reason: "elected"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(h.listen) })
	// Another node is elected: every later graph write of n1's term is
	// refused.
	h.elect("n2")
	ack := enginetest.Dial(t, h.listen).Send(enginetest.ADT("F1", "P1"))
	if ack.Code != hl7.AE {
		t.Fatalf("a fenced ingest answered %s; want AE", ack.Code)
	}
	select {
	case m := <-h.got:
		if _, ok := m.(leadership.Fenced); !ok {
			t.Fatalf("the leadership actor got %#v; want Fenced", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the leadership actor was not told of the fence")
	}
	enginetest.WaitFor(t, "the port to close", 5*time.Second, func() bool { return !open(h.listen) })
}

// A config version bump makes root reload the node's config and restart the
// graph on it (here: on another port), then confirm the version.
func TestConfigChangeRestartsTheGraph(t *testing.T) {
	moved := enginetest.FreeAddr(t)
	h := start(t, func() (*config.Config, error) {
		c, err := config.Parse([]byte(graphConfig(moved)), "test.toml")
		if err == nil {
			c.Outbound[0].Directory = filepath.Join(t.TempDir(), "out")
		}
		return c, err
	})
	h.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(h.listen) })
	h.tell(leadership.ConfigChanged{Version: 7})
	select {
	case m := <-h.got:
		if m != (leadership.ConfigLoaded{Version: 7}) {
			t.Fatalf("the leadership actor got %#v; want ConfigLoaded{7}", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reload was not confirmed")
	}
	// The old graph was stopped, its port closed, before the confirmation;
	// the new listener binds in its own Started, just after.
	if open(h.listen) {
		t.Fatal("the old port is still open after the reload")
	}
	enginetest.WaitFor(t, "the reloaded graph's port to open", 5*time.Second, func() bool { return open(moved) })
	if ack := enginetest.Dial(t, moved).Send(enginetest.ADT("R1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("the reloaded graph answered %s", ack.Code)
	}
	if v := h.eng.Status().ConfigVersion; v != 7 {
		t.Fatalf("status config version %d, want 7", v)
	}
}

// CheckReload says, without reloading, whether a bump would reload this
// node: POST /config/reload asks it, so that a file the node cannot follow
// is refused before the shared version moves.
func TestCheckReloadSaysWhetherTheFileWouldReload(t *testing.T) {
	var broken atomic.Bool
	h := start(t, func() (*config.Config, error) {
		if broken.Load() {
			return config.Parse([]byte("[[inbound]]\nname = \"adt_in\"\ntype = \"mllp\"\nlisten = ["), "test.toml")
		}
		c, err := config.Parse([]byte(graphConfig(enginetest.FreeAddr(t))), "test.toml")
		if err == nil {
			c.Outbound[0].Directory = filepath.Join(t.TempDir(), "out")
		}
		return c, err
	})
	if err := h.eng.CheckReload(); err != nil {
		t.Fatalf("a file that loads: %v", err)
	}
	broken.Store(true)
	if err := h.eng.CheckReload(); err == nil || !strings.Contains(err.Error(), "test.toml") {
		t.Fatalf("a file that does not load: %v; want its error", err)
	}
	if err := start(t, nil).eng.CheckReload(); err == nil {
		t.Fatal("a node without a file to re-read: no error")
	}
}

// A reload applies the graph's sections only: the store, the cluster's
// timings and the API (its listener, its tokens) stay as the node started.
// A reloaded file that changes them says so at WARN, naming them, rather
// than "config reloaded" alone, which let an operator think a new token or
// pool size was in force.
func TestAReloadSaysWhichChangesNeedARestart(t *testing.T) {
	h := start(t, func() (*config.Config, error) {
		c, err := config.Parse([]byte("[store]\npool_size = 9\n[api]\nmetrics_public = true\n"+graphConfig(enginetest.FreeAddr(t))), "test.toml")
		if err == nil {
			c.Outbound[0].Directory = filepath.Join(t.TempDir(), "out")
		}
		return c, err
	})
	h.tell(leadership.ConfigChanged{Version: 3})
	select {
	case <-h.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the reload was not confirmed")
	}
	var warn string
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "restart") {
			warn = line
		}
	}
	if !strings.Contains(warn, "store") || !strings.Contains(warn, "api") || strings.Contains(warn, "cluster") {
		t.Fatalf("no WARN naming [store] and [api] (and only those) as needing a restart; logs:\n%s", h.logs.String())
	}
}

// mf_store_errors_total counts a store call that failed, as a database in
// trouble fails it, not one refused by the fence: that is a leadership
// change (mf_leadership_changes_total), and counted as an error it raised
// the alert on database errors at every failover.
func TestAFencedIngestIsNotAStoreError(t *testing.T) {
	h := start(t, nil)
	h.tell(leadership.Changed{Leader: true, Fence: h.elect("n1"), Reason: "elected"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(h.listen) })
	ingestErrors := func() uint64 { return storeErrors("message_ingest") }

	before := ingestErrors()
	h.store.FailIngest.Store(true)
	if ack := enginetest.Dial(t, h.listen).Send(enginetest.ADT("E1", "P1")); ack.Code != hl7.AE {
		t.Fatalf("a failed ingest answered %s; want AE", ack.Code)
	}
	h.store.FailIngest.Store(false)
	// The sender's AE is written after the count.
	if n := ingestErrors() - before; n != 1 {
		t.Fatalf(`a failed ingest rose mf_store_errors_total{op="message_ingest"} by %d; want 1`, n)
	}

	h.elect("n2")
	before = ingestErrors()
	if ack := enginetest.Dial(t, h.listen).Send(enginetest.ADT("F1", "P1")); ack.Code != hl7.AE {
		t.Fatalf("a fenced ingest answered %s; want AE", ack.Code)
	}
	if n := ingestErrors() - before; n != 0 {
		t.Fatalf(`a fenced ingest rose mf_store_errors_total{op="message_ingest"} by %d; want 0`, n)
	}
}

// boom makes a panicky leadership actor panic.
type boom struct{}

// panicky is a leadership actor that reports this node elected (once, when
// first started) and panics on every boom.
type panicky struct {
	started *atomic.Bool
	hello   chan<- scriptedRef
}

func (p *panicky) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		if p.started.CompareAndSwap(false, true) {
			p.hello <- scriptedRef{ctx.ActorSystem(), ctx.Self()}
			ctx.Send(ctx.Parent(), leadership.Changed{Leader: true, Reason: "single-node"})
		}
	case boom:
		panic("injected: a bug in the leadership actor")
	}
}

// A leadership actor that panics more than 10 times in 10 s is stopped by
// root's supervisor. Root learned nothing of it: the node went on with its
// graph and no elector, reported as leader, or never led again. It now stops
// the graph and the node (Engine.Failed), so that its service manager starts
// it again.
func TestALeadershipActorThatPanicsTooOftenStopsTheEngine(t *testing.T) {
	listen := enginetest.FreeAddr(t)
	cfg, st := parsedGraphConfig(t, listen), migratedStore(t)
	logs := &enginetest.LogBuffer{}
	hello, started := make(chan scriptedRef, 1), &atomic.Bool{}
	eng, err := actors.Start(actors.Options{
		Config: cfg, Store: st, Log: zerolog.New(logs), NodeID: "n1",
		Leadership: actor.PropsFromProducer(func() actor.Actor { return &panicky{started: started, hello: hello} }),
		Trust:      leadership.AlwaysTrusted(),
	})
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
	lead := <-hello
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(listen) })
	// The 11th failure within 10 s stops it.
	for range 11 {
		lead.system.Root.Send(lead.pid, boom{})
	}
	select {
	case err := <-eng.Failed():
		if !strings.Contains(err.Error(), "leadership actor") {
			t.Fatalf("the engine failed with %v; want an error naming the leadership actor", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the engine did not report that its leadership actor was stopped within 10s (status %+v)", eng.Status())
	}
	if s := eng.Status(); s.Leader {
		t.Fatalf("status after the leadership actor was stopped: %+v; want not leader", s)
	}
	if open(listen) {
		t.Fatal("the port is still open after the leadership actor was stopped")
	}
}

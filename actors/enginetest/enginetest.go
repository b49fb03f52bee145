// Package enginetest runs a real engine (the actor tree on a real SQLite
// store) inside a test, with a store whose failures the test can switch on,
// so that tests of listeners and lanes read like their scenario.
package enginetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
	"github.com/messagefoundry/mf/storage/sqlite/sqlitetest"
)

// Engine is one running engine.
type Engine struct {
	Config *config.Config
	Store  *FaultStore
	Dir    string
	// Logs holds every line the engine logged, at debug level and up.
	Logs *LogBuffer
	eng  *actors.Engine

	stopOnce sync.Once
	stopped  chan struct{} // closed when the clean stop has ended
	stopErr  error
	// closeStore closes the engine's store, once.
	closeStore func()
}

// LogBuffer collects log lines safely across goroutines.
type LogBuffer = logbuf.Buffer

// FreeAddr returns a loopback address nobody listens on right now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// ServeTCP runs a peer of the test's making on a loopback port until the
// test ends: each connection is handled by handle on its own goroutine and
// closed when handle returns. It returns the address.
func ServeTCP(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// Start parses cfg (after replacing {{dir}} with a fresh directory), opens a
// SQLite store there and starts the engine; it is stopped when the test ends.
// Every [[inbound]] of type mllp must be open before Start returns.
func Start(t testing.TB, cfg string) *Engine {
	t.Helper()
	return StartIn(t, t.TempDir(), cfg)
}

// StartIn is Start with dir as the directory, whose mf.db the engine
// opens, or makes: an engine started again in the dir of one stopped
// (Shutdown) is that node restarted, on its queue.
func StartIn(t testing.TB, dir, cfg string) *Engine {
	t.Helper()
	cfg = strings.ReplaceAll(cfg, "{{dir}}", dir)
	c, err := config.Parse([]byte(cfg), filepath.Join(dir, "mf.toml"))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	c.Store.Path = filepath.Join(dir, "mf.db")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Path: c.Store.Path})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	fs := &FaultStore{Store: st}
	logs := &LogBuffer{}
	var out io.Writer = logs
	if testing.Verbose() {
		out = io.MultiWriter(logs, zerolog.NewTestWriter(t))
	}
	log := zerolog.New(out).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	eng, err := actors.Start(actors.Options{Config: c, Store: fs, Log: log, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{Config: c, Store: fs, Dir: dir, Logs: logs, eng: eng, stopped: make(chan struct{})}
	e.closeStore = sync.OnceFunc(func() { st.Close() })
	t.Cleanup(func() {
		<-e.Stop()
		if e.stopErr != nil {
			t.Errorf("engine stop: %v", e.stopErr)
		}
		e.closeStore()
	})
	for _, in := range c.Inbound {
		if in.Type == config.InboundMLLP {
			WaitFor(t, "inbound "+in.Name+" to listen", 10*time.Second, func() bool {
				conn, err := net.DialTimeout("tcp", in.Listen, 100*time.Millisecond)
				if err != nil {
					return false
				}
				conn.Close()
				return true
			})
		}
	}
	return e
}

// Stop begins the engine's clean stop (as SIGTERM does), once, and returns
// a channel closed when it has ended. The test's end stops the engine too.
func (e *Engine) Stop() <-chan struct{} {
	e.stopOnce.Do(func() {
		go func() {
			defer close(e.stopped)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e.stopErr = e.eng.Stop(ctx)
		}()
	})
	return e.stopped
}

// Shutdown stops the engine cleanly, waits for it, and closes its store,
// so that another engine may open it (StartIn).
func (e *Engine) Shutdown(t testing.TB) {
	t.Helper()
	<-e.Stop()
	if e.stopErr != nil {
		t.Fatalf("engine stop: %v", e.stopErr)
	}
	e.closeStore()
}

// OutboundHeld tells the engine's lane manager of a hold or release
// (actors.Engine.OutboundHeld), as the API of the node does.
func (e *Engine) OutboundHeld(ctx context.Context, outbound string, held bool) error {
	return e.eng.OutboundHeld(ctx, outbound, held)
}

// QueueChanged tells the engine's lane manager of an operator's retry or
// skip (actors.Engine.QueueChanged), as the API of the node does.
func (e *Engine) QueueChanged(ctx context.Context) error {
	return e.eng.QueueChanged(ctx)
}

// Status is the engine's current role.
func (e *Engine) Status() actors.Status { return e.eng.Status() }

// WaitFor polls cond until it holds or the deadline passes.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Messages reads back every message stored so far (ids are dense from 1 in a
// fresh SQLite store).
func (e *Engine) Messages(t testing.TB) []storage.MessageDetail {
	t.Helper()
	var out []storage.MessageDetail
	for id := int64(1); ; id++ {
		d, err := e.Store.MessageRead(context.Background(), id)
		if err != nil {
			return out
		}
		out = append(out, d)
	}
}

// WriteFile writes content to name in the engine's directory and returns the
// path (for certificates and inbound files).
func WriteFile(t testing.TB, dir, name string, content []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// CopyFile writes the content of the file from to the file to, in place
// (as a renewal tool that rewrites a certificate does).
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// FaultStore is a storage.Store whose ingest can be made to fail.
type FaultStore struct {
	storage.Store
	// FailIngest makes MessageIngest fail, as a database outage would.
	FailIngest atomic.Bool
	// RefuseControlID, when set, makes MessageIngest refuse a batch holding
	// a routed or unrouted message of that control id, as a database refuses
	// a value it cannot store (storage.ErrRefused).
	RefuseControlID atomic.Pointer[string]

	hold atomic.Pointer[chan struct{}]
	held atomic.Int32

	// versionRead is the highest queue version (storage.QueueVersionName)
	// a ConfigVersionRead returned; listedAt is versionRead as the latest
	// QueueLanes began.
	versionRead, listedAt atomic.Int64
	// listings counts the QueueLanes calls.
	listings atomic.Int64
	// frozen, when set, is the queue version every ConfigVersionRead of
	// it answers (FreezeQueueVersion).
	frozen atomic.Pointer[int64]
}

// FreezeQueueVersion makes every read of the queue's version
// (storage.QueueVersionName) answer what it is now, whatever moves it
// later: the lane manager's rescans then list the lanes only when they
// must (FullRescanInterval, or a lane's own word), as if its rescan
// interval were long. A test that must show what reaches the lanes
// without a rescan uses it.
func (f *FaultStore) FreezeQueueVersion(t testing.TB) {
	t.Helper()
	v, err := f.Store.ConfigVersionRead(context.Background(), storage.ConfigVersionReadParams{Name: storage.QueueVersionName})
	if err != nil {
		t.Fatal(err)
	}
	f.frozen.Store(&v)
}

// Listings is how many times the lanes were listed (QueueLanes calls).
func (f *FaultStore) Listings() int64 { return f.listings.Load() }

// ConfigVersionRead implements storage.Store.
func (f *FaultStore) ConfigVersionRead(ctx context.Context, p storage.ConfigVersionReadParams) (int64, error) {
	v, err := f.Store.ConfigVersionRead(ctx, p)
	if frozen := f.frozen.Load(); frozen != nil && err == nil && p.Name == storage.QueueVersionName {
		v = *frozen
	}
	if err == nil && p.Name == storage.QueueVersionName {
		for cur := f.versionRead.Load(); v > cur && !f.versionRead.CompareAndSwap(cur, v); cur = f.versionRead.Load() {
		}
	}
	return v, err
}

// QueueLanes implements storage.Store.
func (f *FaultStore) QueueLanes(ctx context.Context, p storage.QueueLanesParams) ([]storage.LaneSummary, error) {
	f.listedAt.Store(f.versionRead.Load())
	f.listings.Add(1)
	return f.Store.QueueLanes(ctx, p)
}

// LanesListedAt is the queue version (storage.QueueVersionName) the lane
// manager had read when it last began to list the lanes: once it is at
// least the version a change moved it to, a rescan has listed the lanes
// because of that change (the manager reads the version, then lists).
func (f *FaultStore) LanesListedAt() int64 { return f.listedAt.Load() }

// ManagerCaughtUp waits until the lane manager working on f has taken the
// answer of a look at the store begun after every change made so far (an
// outbound held or released, rows stored, a retry): it moves the queue's
// version twice and waits for a listing of the lanes at each. The manager
// looks once at a time, so the second began after it had taken the answer
// of the first. A test that must see that nothing happens (a held outbound
// sends nothing) waits for this instead of sleeping.
func (f *FaultStore) ManagerCaughtUp(t testing.TB) {
	t.Helper()
	for range 2 {
		v, err := f.ConfigVersionBump(context.Background(), storage.ConfigVersionBumpParams{Name: storage.QueueVersionName})
		if err != nil {
			t.Fatal(err)
		}
		WaitFor(t, "the lane manager to look at the store", 20*time.Second, func() bool { return f.LanesListedAt() >= v })
	}
}

// HoldIngest makes every MessageIngest from now on wait, before it stores
// anything, until release is called (or its context ends): a commit that
// takes its time.
func (f *FaultStore) HoldIngest() (release func()) {
	ch := make(chan struct{})
	f.hold.Store(&ch)
	var once sync.Once
	return func() {
		once.Do(func() {
			f.hold.Store(nil)
			close(ch)
		})
	}
}

// IngestsHeld is how many MessageIngest calls HoldIngest keeps waiting now.
func (f *FaultStore) IngestsHeld() int { return int(f.held.Load()) }

// ErrInjected is the failure FaultStore injects.
var ErrInjected = &injected{}

type injected struct{}

func (*injected) Error() string { return "enginetest: injected store failure" }

// MessageIngest implements storage.Store.
func (f *FaultStore) MessageIngest(ctx context.Context, p storage.MessageIngestParams) ([]storage.IngestedMessage, error) {
	if hold := f.hold.Load(); hold != nil {
		f.held.Add(1)
		select {
		case <-*hold:
		case <-ctx.Done():
		}
		f.held.Add(-1)
	}
	if f.FailIngest.Load() {
		return nil, ErrInjected
	}
	if refuse := f.RefuseControlID.Load(); refuse != nil {
		for _, m := range p.Messages {
			if m.ControlID == *refuse && m.Status != storage.MessageRejected {
				return nil, storage.Refused("enginetest: injected")
			}
		}
	}
	return f.Store.MessageIngest(ctx, p)
}

// JSONShape fails the test unless body is a JSON object whose keys are
// exactly those of want, each of the JSON type named ("string", "bool",
// "number", "null", "array", "object"); keys of extra may also appear.
func JSONShape(t testing.TB, what string, body []byte, want map[string]string, extra ...string) map[string]any {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("%s: not a JSON object: %v (%s)", what, err, body)
	}
	allowed := map[string]bool{}
	for _, k := range extra {
		allowed[k] = true
	}
	for k, typ := range want {
		v, ok := got[k]
		if !ok {
			t.Fatalf("%s: no %q in %s", what, k, body)
		}
		if jt := jsonType(v); jt != typ {
			t.Fatalf("%s: %q is %s (%v), want %s", what, k, jt, v, typ)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && !allowed[k] {
			t.Fatalf("%s: unexpected key %q in %s", what, k, body)
		}
	}
	return got
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case float64:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// LimitDiskPages makes the engine's SQLite store as full as a disk with
// room for extra more pages of it (sqlitetest.LimitPages).
func (e *Engine) LimitDiskPages(t testing.TB, extra int64) {
	t.Helper()
	sqlitetest.LimitPages(t, e.Store.Store.(*sqlite.Store).DB(), extra)
}

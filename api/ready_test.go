package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/listeners"
	"github.com/messagefoundry/mf/storage"
)

// A primary whose MLLP port another process holds takes no message on that
// inbound, and the VIP's check of the port fails; it used to answer /ready
// 200, with no metric to show it, so only its log said so (DESIGN §3: "a
// listener that cannot bind keeps retrying and is visible in logs, metrics
// and /ready"). Once the port is free, the listener's retry opens it and
// both say so.
func TestAListenerThatCannotBindIsNotReady(t *testing.T) {
	listen := enginetest.FreeAddr(t)
	holder, err := net.Listen("tcp", listen) // another process's socket on the port
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	v := startWith(t, listen, fileOutbound+`
[[inbound]]
name = "held_in"
type = "mllp"
listen = "`+listen+`"

[[route]]
from = "held_in"
to = ["emr"]
`)
	ready := func() (int, map[string]string) {
		resp, err := http.Get(v.srv.URL + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	bound := func() string {
		var b bytes.Buffer
		metrics.WritePrometheus(&b, false)
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(line, `mf_listener_bound{inbound="held_in"} `) {
				return line
			}
		}
		return "(no mf_listener_bound series for held_in)"
	}

	enginetest.WaitFor(t, "/ready to say the listener cannot open its port", 10*time.Second, func() bool {
		code, _ := ready()
		return code == http.StatusServiceUnavailable
	})
	code, body := ready()
	if want := "the MLLP listener of inbound held_in cannot open " + listen; !strings.Contains(body["reason"], want) || body["error"] != body["reason"] {
		t.Fatalf("/ready while the port is held: %d %v; want a reason (and error) saying %q", code, body, want)
	}
	if got := bound(); got != `mf_listener_bound{inbound="held_in"} 0` {
		t.Fatalf("metric while the port is held: %s; want 0", got)
	}

	holder.Close()
	enginetest.WaitFor(t, "/ready once the port is free", 15*time.Second, func() bool {
		code, _ := ready()
		return code == http.StatusOK
	})
	if got := bound(); got != `mf_listener_bound{inbound="held_in"} 1` {
		t.Fatalf("metric once the listener holds its port: %s; want 1", got)
	}
}

// An MLLP listener still retrying its port makes only the primary unready:
// a standby listens on nothing, so a listener left in the bind state as it
// steps down must not take it out of its load balancer's pool.
func TestAnUnboundListenerMakesOnlyThePrimaryUnready(t *testing.T) {
	v := start(t, fileOutbound)
	for _, leader := range []bool{false, true} {
		status := func() actors.Status {
			s := v.e.Status()
			s.Clustered, s.Leader = true, leader
			s.Unbound = []listeners.Unbound{{Inbound: "adt_in", Listen: v.listen, Since: time.Now()}}
			return s
		}
		srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: status, Log: zerolog.Nop()}).Handler())
		resp, err := http.Get(srv.URL + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		want := http.StatusOK
		if leader {
			want = http.StatusServiceUnavailable
		}
		if resp.StatusCode != want {
			t.Errorf("leader %v with an unbound listener: /ready %d %s; want %d", leader, resp.StatusCode, body, want)
		}
	}
}

// gatedPing is a store whose Ping waits for release, counting the pings in
// flight at once.
type gatedPing struct {
	storage.Store
	release        chan struct{}
	inFlight, most atomic.Int32
}

func (g *gatedPing) Ping(ctx context.Context) error {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The /ready requests that come while a store ping runs share it: /ready
// needs no token, and each request took a connection of the store's pool
// (pool_size, 5 by default) for its ping, so that anyone who could reach
// the API could keep the pool busy with /ready and hold up every message's
// store calls behind it.
func TestReadyChecksShareOneStorePing(t *testing.T) {
	g := &gatedPing{release: make(chan struct{})}
	s := api.New(api.Options{Config: &config.Config{}, Store: g, Log: zerolog.Nop()})
	var arrived atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		s.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	const n = 20
	codes := make(chan int, n)
	for range n {
		go func() {
			resp, err := http.Get(srv.URL + "/ready")
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	enginetest.WaitFor(t, "every request to reach the API", 10*time.Second, func() bool { return arrived.Load() == n })
	// Each request goes on to its ping, or to the one in flight, at once;
	// a moment for the pings of the code before.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) && g.inFlight.Load() < n {
		time.Sleep(5 * time.Millisecond)
	}
	close(g.release)
	for range n {
		if code := <-codes; code != http.StatusOK {
			t.Fatalf("GET /ready: %d, want 200", code)
		}
	}
	if most := g.most.Load(); most != 1 {
		t.Fatalf("%d concurrent GET /ready held %d store pings at once; want 1, shared", n, most)
	}
}

// damagedStore is a store that has found its file damaged.
type damagedStore struct{ storage.Store }

func (damagedStore) Ping(context.Context) error {
	return fmt.Errorf("%w: mf.db (database disk image is malformed (11)): stop mf run, then mf restore --from the latest backup", storage.ErrDamaged)
}

// A node whose store found its file damaged is not ready, and says so: it
// said "the store is unreachable or not migrated", which sends an operator
// to the network or to mf migrate.
func TestADamagedStoreIsNotReadyAndSaysSo(t *testing.T) {
	s := api.New(api.Options{Config: &config.Config{}, Store: damagedStore{}, Log: zerolog.Nop()})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ready", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "damaged") || !strings.Contains(rec.Body.String(), "backup") {
		t.Fatalf("GET /ready of a damaged store: %d %s; want 503 saying the store is damaged and to restore a backup", rec.Code, rec.Body.String())
	}
}

// noWritesStore is a store that takes no writes; clustered says whether it
// is a database server's (a standby, maybe) or an embedded file.
type noWritesStore struct {
	storage.Store
	clustered bool
}

func (noWritesStore) Ping(context.Context) error {
	return fmt.Errorf("ping: %w", storage.ErrReadOnly)
}

func (r noWritesStore) Clusterable() bool { return r.clustered }

// A store that takes no writes is not ready, and the reason fits the store:
// a database server's may be a standby; an embedded file's file system is
// read-only (the advice to point at the primary sent an operator of a
// single SQLite node looking for a server it does not have).
func TestAReadOnlyStoreIsNotReadyWithAReasonThatFitsIt(t *testing.T) {
	for _, c := range []struct {
		clustered bool
		want      string
	}{{true, "primary"}, {false, "file system"}} {
		s := api.New(api.Options{Config: &config.Config{}, Store: noWritesStore{clustered: c.clustered}, Log: zerolog.Nop()})
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ready", nil))
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), c.want) {
			t.Fatalf("GET /ready of a read-only store (clusterable %v): %d %s; want 503 saying %q", c.clustered, rec.Code, rec.Body.String(), c.want)
		}
	}
}

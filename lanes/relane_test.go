package lanes_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/storage"
)

// bandAddr returns a loopback address in 20000-20999 that nobody listens
// on right now (tests that share a machine keep to their own ports).
func bandAddr(t *testing.T) string {
	t.Helper()
	for range 200 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(1000))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatal("no free port in 20000-20999")
	return ""
}

// poisonDestination is an HTTP destination that refuses (400, a permanent
// failure) a message holding POISON while reject is set, and records the
// control ids it accepts, in order.
type poisonDestination struct {
	url    string
	reject atomic.Bool
	mu     sync.Mutex
	got    []string
}

func startPoisonDestination(t *testing.T) *poisonDestination {
	d := &poisonDestination{}
	d.reject.Store(true)
	l, err := net.Listen("tcp", bandAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if d.reject.Load() && strings.Contains(string(body), "POISON") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		d.mu.Lock()
		d.got = append(d.got, r.Header.Get("X-MF-Control-ID"))
		d.mu.Unlock()
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	d.url = "http://" + l.Addr().String() + "/"
	return d
}

func (d *poisonDestination) received() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.got...)
}

// laneKeyConfig routes adt_in on listen to the HTTP destination emr at url,
// split into lanes by laneKey ("" for none); a refused head blocks its lane.
func laneKeyConfig(listen, url, laneKey string) string {
	key := ""
	if laneKey != "" {
		key = fmt.Sprintf("lane_key = %q", laneKey)
	}
	return fmt.Sprintf(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = %q

[[outbound]]
name = "emr"
type = "http"
url = %q
retry_base_seconds = 0.1
retry_max_seconds = 0.2
on_exhausted = "block"

[[route]]
from = "adt_in"
to = ["emr"]
%s
`, listen, url, key)
}

// A node restarted with another lane_key (a new file, or a failover to a
// node whose file has another one) must keep a patient's messages in
// order. Rows kept the lane they were stored in: the patient's first ADT,
// blocked at the destination in its old lane, was overtaken by the second,
// stored in a lane of the new key and delivered at once. The graph now
// moves the unfinished rows into the lanes of the lane_key in force before
// any lane starts: the second waits behind the first, and both are
// delivered in order once the first is released.
func TestARestartWithAnotherLaneKeyKeepsAPatientsMessagesInOrder(t *testing.T) {
	for _, tc := range []struct{ name, before, after string }{
		{"KeyedToKeyed", "PID-3.1", "MSH-4"},
		{"NoneToKeyed", "", "PID-3.1"},
		{"KeyedToNone", "PID-3.1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := startPoisonDestination(t)
			dir, listen := t.TempDir(), bandAddr(t)
			e := enginetest.StartIn(t, dir, laneKeyConfig(listen, dest.url, tc.before))
			send(t, listen, msg("FIRST", "P1", "POISON"))
			var first storage.LaneSummary
			enginetest.WaitFor(t, "the first ADT to block its lane", 10*time.Second, func() bool {
				ls, err := e.Store.QueueLanes(context.Background(), storage.QueueLanesParams{})
				if err != nil || len(ls) != 1 || !ls[0].Blocked() {
					return false
				}
				first = ls[0]
				return true
			})
			e.Shutdown(t)

			e = enginetest.StartIn(t, dir, laneKeyConfig(listen, dest.url, tc.after))
			send(t, listen, msg("SECOND", "P1", "ok"))
			enginetest.WaitFor(t, "the second ADT to be delivered or to queue behind the first", 10*time.Second, func() bool {
				if len(dest.received()) > 0 {
					return true
				}
				ls, err := e.Store.QueueLanes(context.Background(), storage.QueueLanesParams{})
				return err == nil && len(ls) == 1 && ls[0].Depth == 2 && ls[0].Blocked()
			})
			if got := dest.received(); len(got) > 0 {
				t.Fatalf("lane_key %q then %q: the destination got %v while patient P1's first ADT was still blocked; want nothing before it", tc.before, tc.after, got)
			}
			dest.reject.Store(false)
			if _, err := e.Store.QueueRelease(context.Background(), storage.QueueReleaseParams{ID: first.Head.ID}); err != nil {
				t.Fatal(err)
			}
			enginetest.WaitFor(t, "both ADTs to be delivered", 10*time.Second, func() bool { return len(dest.received()) == 2 })
			if got := strings.Join(dest.received(), ","); got != "FIRST,SECOND" {
				t.Fatalf("lane_key %q then %q: patient P1's ADTs reached the destination as %s; want FIRST,SECOND", tc.before, tc.after, got)
			}
			if !strings.Contains(e.Logs.String(), `"moved":1`) {
				t.Errorf("no log line says that a row was moved:\n%s", e.Logs.String())
			}
		})
	}
}

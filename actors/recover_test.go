package actors_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
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
)

// A node that loses its lease with a delivery in hand and is elected again
// gets that delivery back at once. Its old graph has stopped by then (root
// waits for it), so the row, in flight under this process's own lease, is
// as stranded as another node's; left to its row lease (lease_ttl_seconds,
// 60 s by default), its lane waited that long.
func TestReElectionRecoversThisProcesssOwnStrandedDelivery(t *testing.T) {
	var requests atomic.Int32
	inHand, delivered := make(chan struct{}, 4), make(chan struct{}, 4)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // then the server cancels r.Context() when the sender hangs up
		if requests.Add(1) == 1 {
			inHand <- struct{}{}
			<-r.Context().Done() // the first send never ends by itself
			return
		}
		delivered <- struct{}{}
	}))
	t.Cleanup(dest.Close)
	listen := enginetest.FreeAddr(t)
	tell := startScripted(t, slowOutbound(t, "", listen, dest.URL), nil).tell

	// The zero fence: this SQLite store never had a cluster elected into it.
	tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "elected"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("R1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("ingest answered %s", ack.Code)
	}
	select {
	case <-inHand:
	case <-time.After(10 * time.Second):
		t.Fatal("the message never reached the destination")
	}
	tell(leadership.Changed{Leader: false, Fence: storage.Fence{}, Reason: "renew-lost"})
	enginetest.WaitFor(t, "the port to close", 5*time.Second, func() bool { return !open(listen) })
	tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "elected"})
	select {
	case <-delivered:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery this node had in hand when it lost its lease was not made again within 10 s of its re-election (its row lease is 60 s)")
	}
}

// A gain whose promotion recovery the fence refused is a term already lost
// to a newer one: its graph must not start at all. It used to start, open
// its listener and take messages, until its first fenced write stopped it.
func TestAFencedRecoveryStartsNoGraph(t *testing.T) {
	var h *harness
	h = start(t, func() (*config.Config, error) {
		c, err := config.Parse([]byte(graphConfig(h.listen)), "test.toml")
		if err == nil {
			c.Outbound[0].Directory = filepath.Join(t.TempDir(), "out")
		}
		return c, err
	})
	// Term 1 of "n1" was never elected into this store: the fence refuses
	// the recovery, as it would after another node's election.
	h.tell(leadership.Changed{Leader: true, Fence: storage.Fence{Owner: "n1", Term: 1}, Reason: "elected"})
	// Root answers the reload only once it has handled the gain, and a
	// graph it started has logged its start by then (a reload, or a fence,
	// stops it and waits for it first).
	h.tell(leadership.ConfigChanged{Version: 2})
	var got []any
	for len(got) < 2 {
		select {
		case m := <-h.got:
			got = append(got, m)
		case <-time.After(10 * time.Second):
			t.Fatalf("the leadership actor got %#v; want Fenced, then ConfigLoaded{2}", got)
		}
		if _, ok := got[len(got)-1].(leadership.ConfigLoaded); ok {
			break
		}
	}
	if strings.Contains(h.logs.String(), "graph started") {
		t.Fatal("the graph of a term whose recovery was fenced started")
	}
	if f, ok := got[0].(leadership.Fenced); len(got) != 2 || !ok || f.Fence.Term == 0 {
		t.Fatalf("the leadership actor got %#v; want Fenced, then ConfigLoaded{2}", got)
	}
	if h.eng.Status().Leader || open(h.listen) {
		t.Fatalf("after a fenced recovery: status %+v, port open %v", h.eng.Status(), open(h.listen))
	}
}

// unansweredRecovery is a store whose promotion recovery never answers, as
// a database that stopped answering would not: each attempt lasts until its
// deadline.
type unansweredRecovery struct {
	storage.Store
	calls chan struct{}
}

func (u *unansweredRecovery) QueueRecoverForeign(ctx context.Context, _ storage.QueueRecoverForeignParams) (int64, error) {
	select {
	case u.calls <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

// A term that ends during its promotion recovery ends the recovery: root
// goes on to what came after (the loss, a newer term, a shutdown) at once.
// It used to go on retrying for the term gone, three attempts of up to 10 s
// each, with nothing read from its mailbox meanwhile.
func TestATermEndedDuringRecoveryFreesRootAtOnce(t *testing.T) {
	listen := enginetest.FreeAddr(t)
	cfg := slowOutbound(t, "", listen, "http://127.0.0.1:1")
	calls := make(chan struct{}, 1)
	e := startScripted(t, cfg, func(o *actors.Options) {
		o.Store = &unansweredRecovery{Store: o.Store, calls: calls}
		o.Reload = func() (*config.Config, error) { return cfg, nil }
	})
	ended := make(chan struct{})
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Ended: ended, Reason: "elected"})
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("promotion recovery never started")
	}
	close(ended)
	e.tell(leadership.Changed{Leader: false, Fence: storage.Fence{}, Reason: "renew-lost"})
	// Root answers the reload only after it has handled everything before it.
	e.tell(leadership.ConfigChanged{Version: 2})
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-e.got:
			if m == (leadership.ConfigLoaded{Version: 2}) {
				if strings.Contains(e.logs.String(), "graph started") || open(listen) {
					t.Fatal("the graph of a term that ended during its recovery started")
				}
				return
			}
		case <-deadline:
			t.Fatal("root was still busy 5 s after the term ended during its promotion recovery")
		}
	}
}

// endingRecovery is a store whose promotion recovery works, and the term
// ends (end is called) the moment it has.
type endingRecovery struct {
	storage.Store
	end func()
}

func (e *endingRecovery) QueueRecoverForeign(ctx context.Context, p storage.QueueRecoverForeignParams) (int64, error) {
	n, err := e.Store.QueueRecoverForeign(ctx, p)
	e.end()
	return n, err
}

// A term that ends between its promotion recovery and its graph's start
// starts no graph: it would open the listener's port, and answer the
// senders, on a node that no longer leads, until root read the loss.
func TestATermEndedJustAfterItsRecoveryStartsNoGraph(t *testing.T) {
	listen := enginetest.FreeAddr(t)
	cfg := slowOutbound(t, "", listen, "http://127.0.0.1:1")
	ended := make(chan struct{})
	e := startScripted(t, cfg, func(o *actors.Options) {
		o.Store = &endingRecovery{Store: o.Store, end: func() { close(ended) }}
		o.Reload = func() (*config.Config, error) { return cfg, nil }
	})
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Ended: ended, Reason: "elected"})
	if logs := afterTheGain(t, e); strings.Contains(logs, "graph started") {
		t.Fatal("the graph of a term that ended just after its recovery started")
	}
}

// afterTheGain returns root's logs once it has handled everything told
// before: it answers a reload only after that.
func afterTheGain(t *testing.T, e *scriptedEngine) string {
	t.Helper()
	e.tell(leadership.ConfigChanged{Version: 2})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-e.got:
			if m == (leadership.ConfigLoaded{Version: 2}) {
				return e.logs.String()
			}
		case <-deadline:
			t.Fatalf("root did not answer the reload within 10 s (a graph started: %v)", strings.Contains(e.logs.String(), "graph started"))
		}
	}
}

// endingRelane is a store whose term ends (end is called) during the
// graph's first step, the read of the lane_keys (lanes.RelaneBegin), which
// succeeds.
type endingRelane struct {
	storage.Store
	end func()
}

func (e *endingRelane) QueueLaneKeys(ctx context.Context) (map[string]string, error) {
	keys, err := e.Store.QueueLaneKeys(ctx)
	e.end()
	return keys, err
}

// A term that ends during the graph's first step (RelaneBegin, a round trip
// to the database after the recovery) starts no graph either. Root looked
// at the term only before that step: the graph started, its listener
// opened its port and the node said it led, for a term already ended.
func TestATermEndedDuringItsGraphsFirstStepStartsNoGraph(t *testing.T) {
	listen := enginetest.FreeAddr(t)
	cfg := slowOutbound(t, "", listen, "http://127.0.0.1:1")
	ended := make(chan struct{})
	var once sync.Once
	e := startScripted(t, cfg, func(o *actors.Options) {
		o.Store = &endingRelane{Store: o.Store, end: func() { once.Do(func() { close(ended) }) }}
		o.Reload = func() (*config.Config, error) { return cfg, nil }
	})
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Ended: ended, Reason: "elected"})
	logs := afterTheGain(t, e)
	if strings.Contains(logs, "graph started") || strings.Contains(logs, "MLLP listener open") {
		t.Fatal("the graph of a term that ended during its first step started")
	}
	if !strings.Contains(logs, "ended before its graph could start") {
		t.Fatal("root did not say why it started no graph")
	}
}

// A stop during promotion recovery ends it: root answers the shutdown at
// once, starts no graph and does not report the term lost. Recovery used to
// run on regardless, up to three attempts of 10 s against a database that
// did not answer, while the shutdown waited behind it in root's mailbox
// (mf run gives a stop the drain timeout and 30 s).
func TestAStopDuringRecoveryEndsIt(t *testing.T) {
	listen := enginetest.FreeAddr(t)
	cfg := slowOutbound(t, "", listen, "http://127.0.0.1:1")
	calls := make(chan struct{}, 1)
	logs := &enginetest.LogBuffer{}
	hello, got := make(chan scriptedRef, 1), make(chan any, 16)
	eng, err := actors.Start(actors.Options{
		Config: cfg, Store: &unansweredRecovery{Store: migratedStore(t), calls: calls}, Log: zerolog.New(logs), NodeID: "n1",
		Leadership: actor.PropsFromProducer(func() actor.Actor { return &scripted{hello: hello, got: got} }),
		Trust:      leadership.AlwaysTrusted(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	lead := <-hello
	lead.system.Root.Send(lead.pid, leadership.Changed{Leader: true, Fence: storage.Fence{}, Ended: make(chan struct{}), Reason: "elected"})
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("promotion recovery never started")
	}
	// Under the first attempt's 10 s: the stop must not wait for it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := eng.Stop(ctx); err != nil {
		t.Fatalf("the stop waited behind promotion recovery: %v", err)
	}
	if l := logs.String(); strings.Contains(l, "graph started") || !strings.Contains(l, "stopping during promotion recovery") {
		t.Fatal("a stop during promotion recovery started the graph, or did not say why it started none")
	}
	for {
		select {
		case m := <-got:
			if f, ok := m.(leadership.Fenced); ok {
				t.Fatalf("a stop during promotion recovery reported the term lost: %#v", f)
			}
		default:
			return
		}
	}
}

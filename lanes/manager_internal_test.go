package lanes

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// However many wake-ups arrive for a lane whose destination is stuck, the
// lane gets one Wake at a time (its mailbox stays bounded), it still
// delivers what arrived meanwhile, and once its lane runs dry its actor is
// stopped, also after a retry whose timer woke it.
func TestWakesAreCoalescedAndDrainedLanesStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	var requests atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch requests.Add(1) {
		case 1:
			<-release // stuck, then refuses: the head is retried
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case 2: // refused again: this retry is woken by the lane's own timer
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer dest.Close()
	defer close(release)

	cfg, err := config.Parse([]byte(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:2575"

[[outbound]]
name = "emr"
type = "http"
url = "`+dest.URL+`"
retry_base_seconds = 0.05
retry_max_seconds = 0.05

[[route]]
from = "adt_in"
to = ["emr"]
`), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const lane = "emr/P1"
	ingest := func(n int) {
		msgs := make([]storage.NewMessage, n)
		for i := range msgs {
			msgs[i] = storage.NewMessage{Inbound: "adt_in", ControlID: "C", Payload: []byte("MSH|^~\\&|A|B|C|D|20261121||ADT^A01|C|P|2.5.1\rPID|1||P1\r"),
				Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "emr", Lane: lane}}}
		}
		if _, err := st.MessageIngest(ctx, storage.MessageIngestParams{Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	ingest(1)

	system := actor.NewActorSystem()
	env := &Env{Ctx: ctx, Store: st, Owner: "test#1", Trust: func() bool { return true }, Config: cfg,
		Log: zerolog.Nop(), OnFenced: func(string, error) { t.Error("fenced") }}
	manager := system.Root.Spawn(NewManager(env))
	defer system.Root.Stop(manager)
	wakes := func() map[string]int {
		res, err := system.Root.RequestFuture(manager, inspect{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		return res.(map[string]int)
	}

	waitUntil(t, "the lane's first send to be stuck", 10*time.Second, func() bool { return requests.Load() == 1 })
	for i := 0; i < 300; i++ {
		ingest(1)
		system.Root.Send(manager, Ingested{Lanes: []string{lane}})
	}
	// The manager handles messages in order: this answer comes after all
	// wake-ups were handled.
	if got := wakes()[lane]; got > 2 {
		t.Fatalf("a stuck lane was sent %d Wakes for 300 wake-ups; want at most 2 (the one it took, one queued)", got)
	}

	release <- struct{}{}
	waitUntil(t, "all 301 rows delivered and the lane's actor stopped", 30*time.Second, func() bool {
		return requests.Load() == 303 && len(wakes()) == 0 // 2 refused + 301 delivered
	})
	if n := activeLanes.Load(); n != 0 {
		t.Fatalf("mf_lanes_active = %d after the lane ran dry", n)
	}
}

// waitUntil polls cond until it holds or the deadline passes (lanes' own
// tests cannot import enginetest: it imports this package).
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package actors_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// holdToken is the operator token of the hold test's nodes.
const holdToken = "hold-test-operator-token"

// heldConfig is the hold test's config: an HTTP outbound "emr" and an
// operator token for the API.
func heldConfig(t *testing.T, listen, dest string) *config.Config {
	t.Helper()
	sum := sha256.Sum256([]byte(holdToken))
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
[[api.tokens]]
name = "ops"
role = "operator"
sha256 = %q

[[inbound]]
name = "adt_in"
type = "mllp"
listen = %q

[[outbound]]
name = "emr"
type = "http"
url = %q

[[route]]
from = "adt_in"
to = ["emr"]
`, hex.EncodeToString(sum[:]), listen, dest)), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Two nodes on one PostgreSQL database, each with its own connections: an
// operator holds the outbound through the standby's API, and the primary
// sends nothing more while it still acknowledges and queues every message.
// The primary fails over to the standby, which finds the hold and sends
// nothing either; the release (on the new primary's API) delivers every
// queued message, in order.
func TestAHoldFromAStandbyStopsThePrimaryAndOutlivesAFailover(t *testing.T) {
	url := pgtest.NewSchema(t)
	connect := func() *enginetest.FaultStore {
		s, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return &enginetest.FaultStore{Store: s}
	}
	stA, stB := connect(), connect()
	if err := stA.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	elect := func(owner string) storage.Fence { return electOn(t, stA, owner) }
	dest := enginetest.StartHTTPDestination(t)
	listen := enginetest.FreeAddr(t)
	cfg := heldConfig(t, listen, dest.URL)
	send := func(id string) {
		t.Helper()
		if ack := enginetest.Dial(t, listen).Send(enginetest.ADT(id, "P1")); ack.Code != "AA" {
			t.Fatalf("%s answered %s; want AA", id, ack.Code)
		}
	}

	a := startNodeOn(t, stA, "a", cfg)
	a.tell(leadership.Changed{Leader: true, Fence: elect("a"), Reason: "elected"})
	enginetest.WaitFor(t, "a's port to open", 10*time.Second, func() bool { return open(listen) })
	b := startNodeOn(t, stB, "b", cfg) // a standby: it is never told it leads, until the failover
	aStopped := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(a.logs.String(), b.logs.String())
		}
		if !aStopped {
			a.stop(t)
		}
		b.stop(t)
	})
	apiB := httptest.NewServer(api.New(api.Options{Config: cfg, Store: stB, Status: b.eng.Status, Log: zerolog.Nop()}).Handler())
	t.Cleanup(apiB.Close)
	post := func(path string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, apiB.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+holdToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s on the standby's API: %d", path, resp.StatusCode)
		}
	}

	send("D1")
	enginetest.WaitFor(t, "the primary to deliver D1", 10*time.Second, func() bool { return len(dest.Received()) == 1 })
	if b.eng.Status().Leader {
		t.Fatal("b leads; want it a standby")
	}
	post("/outbounds/emr/hold")
	stA.ManagerCaughtUp(t)
	send("D2")
	send("D3")
	stA.ManagerCaughtUp(t)
	if got := dest.Received(); !slices.Equal(got, []string{"D1"}) {
		t.Fatalf("the primary sent %v after a hold made on the standby; want only D1, sent before it", got)
	}

	a.stop(t)
	aStopped = true
	b.tell(leadership.Changed{Leader: true, Fence: elect("b"), Reason: "elected"})
	enginetest.WaitFor(t, "b's port to open", 10*time.Second, func() bool { return open(listen) })
	send("D4")
	stB.ManagerCaughtUp(t)
	if got := dest.Received(); !slices.Equal(got, []string{"D1"}) {
		t.Fatalf("the new primary sent %v of an outbound held before the failover; want nothing more than D1", got)
	}
	post("/outbounds/emr/release")
	enginetest.WaitFor(t, "the held messages delivered after the release", 20*time.Second, func() bool { return len(dest.Received()) == 4 })
	if got := dest.Received(); !slices.Equal(got, []string{"D1", "D2", "D3", "D4"}) {
		t.Fatalf("delivered %v; want D1, D2, D3, D4 in order", got)
	}
}

// gatedDestination is an HTTP destination that records the control ids it
// is sent, in order, each only once the gate is open; atGate is closed when
// the first send waits there.
type gatedDestination struct {
	*httptest.Server
	gate, atGate chan struct{}
	mu           sync.Mutex
	got          []string
}

func startGatedDestination(t *testing.T) *gatedDestination {
	t.Helper()
	d := &gatedDestination{gate: make(chan struct{}), atGate: make(chan struct{})}
	var once sync.Once
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(d.atGate) })
		select {
		case <-d.gate:
		case <-r.Context().Done():
			return
		}
		d.mu.Lock()
		d.got = append(d.got, r.Header.Get("X-MF-Control-ID"))
		d.mu.Unlock()
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *gatedDestination) received() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got)
}

// An operator's hold reaches the primary's lanes when the API answers, not
// at the lane manager's next rescan: the queue's version is frozen here, so
// that no rescan lists the lanes (as with a long rescan interval), and the
// hold must come some other way. Two messages of one lane are stored in one
// transaction, so the lane knows of the second from the start; the first is
// in flight (its send waits at the destination) when the outbound is held.
// That send finishes; the second is not claimed (before, the write that
// recorded the first claimed it with it, and it was sent). The release then
// delivers it at once, again with no rescan to list the lanes.
func TestAHoldReachesThePrimarysLanesWhenTheAPIAnswers(t *testing.T) {
	dest := startGatedDestination(t)
	sum := sha256.Sum256([]byte(holdToken))
	e := enginetest.Start(t, fmt.Sprintf(`
[[api.tokens]]
name = "ops"
role = "operator"
sha256 = %q

[[inbound]]
name = "drop"
type = "file"
directory = "{{dir}}/in"
poll_interval_seconds = 0.05

[[outbound]]
name = "emr"
type = "http"
url = %q

[[route]]
from = "drop"
to = ["emr"]
`, hex.EncodeToString(sum[:]), dest.URL))
	srv := httptest.NewServer(api.New(api.Options{Config: e.Config, Store: e.Store, Status: e.Status, OutboundHeld: e.OutboundHeld, Log: zerolog.Nop()}).Handler())
	t.Cleanup(srv.Close)
	post := func(path string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+holdToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d", path, resp.StatusCode)
		}
	}
	queued := func(id int64) storage.QueueRow {
		t.Helper()
		m, err := e.Store.MessageRead(context.Background(), id)
		if err != nil || len(m.Queue) != 1 {
			t.Fatalf("message %d: %v, %d queue rows", id, err, len(m.Queue))
		}
		return m.Queue[0]
	}
	// The manager's first listing (before any hold) is over; from now on
	// none comes unless it must.
	enginetest.WaitFor(t, "the lane manager's first listing", 10*time.Second, func() bool { return e.Store.Listings() > 0 })
	e.Store.FreezeQueueVersion(t)

	in := filepath.Join(e.Dir, "in")
	if err := os.MkdirAll(in, 0o700); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(e.Dir, "batch.hl7")
	if err := os.WriteFile(tmp, []byte(enginetest.ADT("M1", "P1")+enginetest.ADT("M2", "P1")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(in, "batch.hl7")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dest.atGate:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for M1's send")
	}
	post("/outbounds/emr/hold")
	close(dest.gate)
	enginetest.WaitFor(t, "M1 recorded delivered", 10*time.Second, func() bool { return queued(1).Status == storage.QueueDone })
	if r := queued(2); r.Status != storage.QueuePending || r.Attempts != 0 {
		t.Fatalf("M2, of an outbound held before M1's send ended, is %s after %d attempts; want pending, unclaimed (the lanes must see the hold once the API has answered)", r.Status, r.Attempts)
	}

	post("/outbounds/emr/release")
	enginetest.WaitFor(t, "M2 delivered after the release", 10*time.Second, func() bool { return len(dest.received()) == 2 })
	if got := dest.received(); !slices.Equal(got, []string{"M1", "M2"}) {
		t.Fatalf("delivered %v; want M1, M2", got)
	}
}

// A hold made through a standby's API stops the primary's claims as soon as
// it has committed, though the primary's lane manager learns of it only at
// a rescan: the queue's version is frozen on the primary here, so that no
// rescan reads the hold unless a lane asks for one. M1 is in flight (its
// send waits at the destination) when the hold is made; M2 is stored after
// it. M1's send finishes; M2 is never claimed: the claim refuses the rows
// of a held outbound (before, the primary claimed and sent it). The lane
// that found nothing to claim asks for a listing, which reads the hold.
func TestAHoldFromAStandbyStopsThePrimarysClaimsAtOnce(t *testing.T) {
	url := pgtest.NewSchema(t)
	connect := func() *enginetest.FaultStore {
		s, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return &enginetest.FaultStore{Store: s}
	}
	stA, stB := connect(), connect()
	if err := stA.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	dest := startGatedDestination(t)
	listen := enginetest.FreeAddr(t)
	cfg := heldConfig(t, listen, dest.URL)
	send := func(id string) {
		t.Helper()
		if ack := enginetest.Dial(t, listen).Send(enginetest.ADT(id, "P1")); ack.Code != "AA" {
			t.Fatalf("%s answered %s; want AA", id, ack.Code)
		}
	}
	a := startNodeOn(t, stA, "a", cfg)
	a.tell(leadership.Changed{Leader: true, Fence: electOn(t, stA, "a"), Reason: "elected"})
	enginetest.WaitFor(t, "a's port to open", 10*time.Second, func() bool { return open(listen) })
	b := startNodeOn(t, stB, "b", cfg) // a standby
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(a.logs.String(), b.logs.String())
		}
		a.stop(t)
		b.stop(t)
	})
	apiB := httptest.NewServer(api.New(api.Options{Config: cfg, Store: stB, Status: b.eng.Status, OutboundHeld: b.eng.OutboundHeld, Log: zerolog.Nop()}).Handler())
	t.Cleanup(apiB.Close)
	queued := func(id int64) storage.QueueRow {
		t.Helper()
		m, err := stA.MessageRead(context.Background(), id)
		if err != nil || len(m.Queue) != 1 {
			t.Fatalf("message %d: %v, %d queue rows", id, err, len(m.Queue))
		}
		return m.Queue[0]
	}
	enginetest.WaitFor(t, "the primary's first listing", 10*time.Second, func() bool { return stA.Listings() > 0 })
	stA.FreezeQueueVersion(t)
	listed := stA.Listings()

	send("M1")
	select {
	case <-dest.atGate:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for M1's send")
	}
	req, _ := http.NewRequest(http.MethodPost, apiB.URL+"/outbounds/emr/hold", nil)
	req.Header.Set("Authorization", "Bearer "+holdToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /outbounds/emr/hold on the standby's API: %d", resp.StatusCode)
	}
	send("M2")
	close(dest.gate)
	enginetest.WaitFor(t, "M1 recorded delivered", 10*time.Second, func() bool { return queued(1).Status == storage.QueueDone })
	enginetest.WaitFor(t, "M2 claimed, or a listing asked for by a lane that found nothing", 10*time.Second, func() bool {
		return queued(2).Attempts > 0 || stA.Listings() > listed
	})
	if r := queued(2); r.Status != storage.QueuePending || r.Attempts != 0 {
		t.Fatalf("M2, stored after a hold made on the standby, is %s after %d attempts on the primary; want pending, unclaimed", r.Status, r.Attempts)
	}
	if got := dest.received(); !slices.Equal(got, []string{"M1"}) {
		t.Fatalf("delivered %v; want only M1, in flight before the hold", got)
	}
}

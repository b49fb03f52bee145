package lanes

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// countingStore counts the lane writes that reach the store.
type countingStore struct {
	storage.Store
	claims, completes, advances atomic.Int64
	// hideLanes makes QueueLanes answer nothing, so that the manager's
	// rescans start no lane.
	hideLanes atomic.Bool

	mu sync.Mutex
	// floors holds the From of every claim that took a row, by the row,
	// and of every claim that found nothing, under noWork.
	floors map[int64][]int64
}

// noWork is the key of countingStore.floors for claims that found nothing.
const noWork = -1

func (c *countingStore) QueueClaimNext(ctx context.Context, p storage.QueueClaimNextParams) (storage.QueueClaim, error) {
	c.claims.Add(1)
	claimed, err := c.Store.QueueClaimNext(ctx, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.floors == nil {
		c.floors = map[int64][]int64{}
	}
	switch {
	case err == nil:
		c.floors[claimed.Row.ID] = append(c.floors[claimed.Row.ID], p.From)
	case errors.Is(err, storage.ErrNoWork):
		c.floors[noWork] = append(c.floors[noWork], p.From)
	}
	return claimed, err
}

// floorsOf returns the From of each claim that took row id, in order.
func (c *countingStore) floorsOf(id int64) []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.floors[id]...)
}

func (c *countingStore) QueueLanes(ctx context.Context) ([]storage.LaneSummary, error) {
	if c.hideLanes.Load() {
		return nil, nil
	}
	return c.Store.QueueLanes(ctx)
}

func (c *countingStore) QueueComplete(ctx context.Context, p storage.QueueCompleteParams) error {
	c.completes.Add(1)
	return c.Store.QueueComplete(ctx, p)
}

func (c *countingStore) QueueAdvance(ctx context.Context, p storage.QueueAdvanceParams) (storage.QueueAdvanced, error) {
	c.advances.Add(1)
	return c.Store.QueueAdvance(ctx, p)
}

// laneFixture is one HTTP destination "emr", a SQLite store holding rows of
// lane emr/P1, and a lane manager over them.
type laneFixture struct {
	ctx     context.Context
	store   *countingStore
	system  *actor.ActorSystem
	manager *actor.PID
	ids     []int64
}

// fixtureLane is the lane every fixture row is in.
const fixtureLane = "emr/P1"

// newLaneFixture stores rows rows, then starts a manager whose destination
// "emr" posts to url; extra adds lines to the destination's config.
func newLaneFixture(t *testing.T, url, extra string, rows int) *laneFixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg, err := config.Parse([]byte(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:2575"

[[outbound]]
name = "emr"
type = "http"
url = "`+url+`"
`+extra+`

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
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f := &laneFixture{ctx: ctx, store: &countingStore{Store: st}, system: actor.NewActorSystem()}
	f.ingest(t, rows)
	env := &Env{Ctx: ctx, Store: f.store, Owner: "test#1", Trust: func() bool { return true }, Config: cfg,
		Log: zerolog.Nop(), OnFenced: func(string, error) { t.Error("fenced") }}
	f.manager = f.system.Root.Spawn(NewManager(env)) // its first rescan wakes the lane
	return f
}

// ingest stores n more rows in the fixture's lane.
func (f *laneFixture) ingest(t *testing.T, n int) {
	t.Helper()
	msgs := make([]storage.NewMessage, n)
	for i := range msgs {
		msgs[i] = storage.NewMessage{Inbound: "adt_in", ControlID: "C", Payload: []byte("MSH|^~\\&|A|B|C|D|20261121||ADT^A01|C|P|2.5.1\rPID|1||P1\r"),
			Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "emr", Lane: fixtureLane}}}
	}
	res, err := f.store.MessageIngest(f.ctx, storage.MessageIngestParams{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		f.ids = append(f.ids, r.QueueIDs[0])
	}
}

// row reads queue row i of the fixture's lane.
func (f *laneFixture) row(t *testing.T, i int) storage.QueueRow {
	t.Helper()
	d, err := f.store.MessageRead(f.ctx, int64(i+1)) // one message per row, ids from 1
	if err != nil || len(d.Queue) != 1 || d.Queue[0].ID != f.ids[i] {
		t.Fatalf("read row %d: %+v, %v", i, d, err)
	}
	return d.Queue[0]
}

// A delivering lane writes once per delivered row: the write that records a
// delivery also claims the next row (QueueAdvance).
func TestALaneRecordsADeliveryAndClaimsTheNextInOneWrite(t *testing.T) {
	var requests atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	defer dest.Close()
	const rows = 50
	f := newLaneFixture(t, dest.URL, "", rows)
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "every row delivered and recorded", 20*time.Second, func() bool {
		return requests.Load() == rows && f.row(t, rows-1).Status == storage.QueueDone
	})
	if a, c := f.store.advances.Load(), f.store.completes.Load(); a != rows || c != 0 {
		t.Fatalf("%d rows delivered with %d advances and %d completes; want %d advances (one write per row), no completes", rows, a, c, rows)
	}
	// The first claim; any more are the manager's rescans finding nothing.
	if n := f.store.claims.Load(); n < 1 || n > 1+int64(20*time.Second/RescanInterval) {
		t.Fatalf("%d separate claims for one lane's %d rows", n, rows)
	}
}

// A lane that delivers the newest row the manager told it of records the
// delivery with a completion alone: by FIFO there is no next row to look
// for. A row stored later comes with its own Wake, and a lane told of a
// newer row than the one it delivers claims that one in the same write.
func TestALaneDeliveringItsNewestRowDoesNotLookForANext(t *testing.T) {
	var requests atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	defer dest.Close()
	f := newLaneFixture(t, dest.URL, "", 0)
	defer f.system.Root.Stop(f.manager)
	// Only Ingested starts the lane: a lane started by a rescan does not
	// know its newest row, and looks for a next one after every delivery.
	f.store.hideLanes.Store(true)

	delivered := func(n int) {
		t.Helper()
		waitUntil(t, "the rows delivered and recorded", 20*time.Second, func() bool {
			return requests.Load() == int64(n) && f.row(t, n-1).Status == storage.QueueDone
		})
	}
	for i := range 3 { // light traffic: each row stored and delivered on its own
		f.ingest(t, 1)
		f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[i]}})
		delivered(i + 1)
	}
	if a, c := f.store.advances.Load(), f.store.completes.Load(); a != 0 || c != 3 {
		t.Fatalf("3 rows, each the newest of its lane: %d advances and %d completes, want 0 and 3", a, c)
	}
	f.ingest(t, 2)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[4]}})
	delivered(5)
	if a, c := f.store.advances.Load(), f.store.completes.Load(); a != 1 || c != 4 {
		t.Fatalf("2 rows stored together: %d advances and %d completes in all, want 1 and 4", a, c)
	}
}

// A lane woken while its head backs off (a Wake for a newly stored row)
// finds nothing to claim, and stays: its own timer claims the head again
// when due, starting the head lookup at that row (QueueClaimNextParams.From).
// It used to go idle, be stopped, and leave the retry to the manager's next
// rescan, up to RescanInterval later than the backoff said.
func TestALaneWokenDuringABackoffRetriesOnItsOwnTimer(t *testing.T) {
	var requests atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the head is retried
		}
	}))
	defer dest.Close()
	f := newLaneFixture(t, dest.URL, "retry_base_seconds = 0.5\nretry_max_seconds = 0.5", 2)
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "the first send refused", 20*time.Second, func() bool { return requests.Load() == 1 })
	// Handled by the lane after its retry is recorded: the head is backing off.
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}})
	waitUntil(t, "both rows delivered", 20*time.Second, func() bool {
		return requests.Load() == 3 && f.row(t, 1).Status == storage.QueueDone
	})
	// (The manager's first Wake may also land during the backoff.)
	nothing := f.store.floorsOf(noWork)
	if len(nothing) == 0 {
		t.Fatal("no claim found the lane empty: the Wake was not handled during the backoff")
	}
	for _, from := range nothing {
		if from != f.ids[0] {
			t.Fatalf("claims that found nothing came from %v; want each from row %d", nothing, f.ids[0])
		}
	}
	// The first claim knows no floor; the retry is the same lane actor's.
	if got := f.store.floorsOf(f.ids[0]); len(got) != 2 || got[0] != 0 || got[1] != f.ids[0] {
		t.Fatalf("claims of the retried head came from %v; want [0 %d]", got, f.ids[0])
	}
}

// A lane stopped on a clean shutdown, holding a row it claimed but has not
// sent, gives the row back: pending again, not stranded in flight until its
// lease runs out.
func TestAStoppingLaneGivesBackTheRowItHasNotSent(t *testing.T) {
	sending := make(chan struct{}, 1)
	release := make(chan struct{})
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sending <- struct{}{}:
			<-release // the first send is under way when the stop comes
		default:
		}
	}))
	defer dest.Close()
	f := newLaneFixture(t, dest.URL, "", 3)

	select {
	case <-sending:
	case <-time.After(20 * time.Second):
		t.Fatal("the lane never sent its first row")
	}
	stopped := f.system.Root.StopFuture(f.manager)
	close(release) // the send ends after the stop was asked for
	if err := stopped.Wait(); err != nil {
		t.Fatal(err)
	}
	if r := f.row(t, 0); r.Status != storage.QueueDone {
		t.Fatalf("the row being sent at the stop: %+v, want done (a clean stop finishes the delivery in hand)", r)
	}
	r := f.row(t, 1)
	if r.Status != storage.QueuePending || r.LeaseOwner != "" || r.LastError != "not sent: the lane stopped first" {
		t.Fatalf("the row claimed but not sent at the stop: %+v, want pending again", r)
	}
	if r := f.row(t, 2); r.Status != storage.QueuePending || r.Attempts != 0 {
		t.Fatalf("the third row: %+v, want untouched", r)
	}
}

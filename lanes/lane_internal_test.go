package lanes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// countingStore counts the lane writes that reach the store.
type countingStore struct {
	storage.Store
	claims, completes, advances atomic.Int64
	// advancesForNothing counts the QueueAdvances that looked for a next
	// row and found none.
	advancesForNothing atomic.Int64
	// hideLanes makes QueueLanes answer nothing, so that the manager's
	// rescans start no lane.
	hideLanes atomic.Bool
	// lanesGate, when set, holds every QueueLanes call until it is closed;
	// lanesHeld counts the calls that came to a gate, lanesIn the calls
	// under way, lanesMax the most at once and lanesCalls them all.
	lanesGate                                atomic.Pointer[chan struct{}]
	lanesHeld, lanesIn, lanesMax, lanesCalls atomic.Int64
	// laterPagesGate, when set, holds every QueueLanes call for a page
	// after the first (After set) until it is closed; laterPagesHeld
	// counts the calls that came to it.
	laterPagesGate atomic.Pointer[chan struct{}]
	laterPagesHeld atomic.Int64
	// claimGate, when set, holds every QueueClaimNext call until it is
	// closed; claimsHeld counts the calls that came to it.
	claimGate  atomic.Pointer[chan struct{}]
	claimsHeld atomic.Int64

	// loseNextDead makes the next QueueDead find its claim lost: the row is
	// re-pended instead (as the sweep does once a lease has run out) and
	// the call answers ErrClaimLost.
	loseNextDead atomic.Bool
	// givenBack counts the rows QueueGiveBack gave back.
	givenBack atomic.Int64
	// failCompleteOnce makes the next QueueComplete answer an error after
	// its write committed, as when the connection drops before the reply.
	failCompleteOnce atomic.Bool
	// failAdvanceAfterCommitOnce and failClaimAfterCommitOnce make the next
	// QueueAdvance, or the next QueueClaimNext that claims a row, answer an
	// error after its write committed: the reply lost, as when the
	// connection drops during the COMMIT (PostgreSQL restarting or failing
	// over, a proxy restarting).
	failAdvanceAfterCommitOnce, failClaimAfterCommitOnce atomic.Bool
	// releasedOwn counts the rows QueueReleaseOwn gave back.
	releasedOwn atomic.Int64
	// failRecordOnce makes the next QueueComplete or QueueAdvance fail
	// before it writes anything, as a database away or full would.
	failRecordOnce atomic.Bool
	// failFailureRecordOnce makes the next QueueRetry, QueueHold or
	// QueueDead, the record of a failed send, fail before it writes
	// anything, failedRecordTakes after it was called, as a database away
	// would; failureRecords counts those calls.
	failFailureRecordOnce atomic.Bool
	failureRecords        atomic.Int64
	// failedFailureRecordAt is when that first record was tried (and
	// failed), in Unix nanoseconds.
	failedFailureRecordAt atomic.Int64
	// doubtOnce makes the fixture's Trust answer false once: leadership in
	// doubt at that moment.
	doubtOnce atomic.Bool
	// panicOnce makes the next QueueClaimNext panic, on the lane actor's
	// goroutine, before it claims anything: a bug in a lane.
	panicOnce atomic.Bool
	// refuseClaims makes every QueueClaimNext fail, as a database away
	// would, while it is set.
	refuseClaims atomic.Bool
	// panicCompleteOnce makes the next QueueComplete panic before it writes
	// anything: a bug in a lane after its send, with the row in hand.
	panicCompleteOnce atomic.Bool
	// failHolds makes every OutboundHolds fail, as a database away would,
	// while it is set.
	failHolds atomic.Bool
	// afterAdvance, when set, sees every QueueAdvance's outcome before the
	// lane does.
	afterAdvance func(storage.QueueAdvanced)

	mu sync.Mutex
	// floors holds the From of every claim that took a row, by the row,
	// and of every claim that found nothing, under noWork.
	floors map[int64][]int64
}

// claimAhead is the countingStore's ClaimAhead: the fixture's store is
// SQLite, which claims no runs for the engine, but its runs are correct, and
// the lane tests exercise the lane's runs on it as PostgreSQL's.
const claimAhead = 7

// ClaimAhead implements storage.Store.
func (c *countingStore) ClaimAhead() int { return claimAhead }

// noWork is the key of countingStore.floors for claims that found nothing.
const noWork = -1

func (c *countingStore) QueueClaimNext(ctx context.Context, p storage.QueueClaimNextParams) (storage.QueueClaim, error) {
	c.claims.Add(1)
	if c.panicOnce.CompareAndSwap(true, false) {
		panic("injected: a bug in a lane")
	}
	if c.refuseClaims.Load() {
		return storage.QueueClaim{}, errors.New("injected: connection refused")
	}
	if gate := c.claimGate.Load(); gate != nil {
		c.claimsHeld.Add(1)
		select {
		case <-*gate:
		case <-ctx.Done():
			return storage.QueueClaim{}, ctx.Err()
		}
	}
	claimed, err := c.Store.QueueClaimNext(ctx, p)
	if err == nil && c.failClaimAfterCommitOnce.CompareAndSwap(true, false) {
		return storage.QueueClaim{}, errors.New("connection reset by peer (injected, after the commit)")
	}
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

func (c *countingStore) QueueLanes(ctx context.Context, p storage.QueueLanesParams) ([]storage.LaneSummary, error) {
	c.lanesCalls.Add(1)
	in := c.lanesIn.Add(1)
	defer c.lanesIn.Add(-1)
	for m := c.lanesMax.Load(); in > m && !c.lanesMax.CompareAndSwap(m, in); m = c.lanesMax.Load() {
	}
	if gate := c.lanesGate.Load(); gate != nil {
		c.lanesHeld.Add(1)
		select {
		case <-*gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if gate := c.laterPagesGate.Load(); gate != nil && p.After != "" {
		c.laterPagesHeld.Add(1)
		select {
		case <-*gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if c.hideLanes.Load() {
		return nil, nil
	}
	return c.Store.QueueLanes(ctx, p)
}

func (c *countingStore) QueueComplete(ctx context.Context, p storage.QueueCompleteParams) error {
	c.completes.Add(1)
	if c.panicCompleteOnce.CompareAndSwap(true, false) {
		panic("injected: a bug in a lane, after its send")
	}
	if c.failRecordOnce.CompareAndSwap(true, false) {
		return errors.New("injected: database or disk is full")
	}
	err := c.Store.QueueComplete(ctx, p)
	if err == nil && c.failCompleteOnce.CompareAndSwap(true, false) {
		return errors.New("connection reset by peer (injected, after the commit)")
	}
	return err
}

func (c *countingStore) QueueAdvance(ctx context.Context, p storage.QueueAdvanceParams) (storage.QueueAdvanced, error) {
	c.advances.Add(1)
	if c.failRecordOnce.CompareAndSwap(true, false) {
		return storage.QueueAdvanced{}, errors.New("injected: database or disk is full")
	}
	a, err := c.Store.QueueAdvance(ctx, p)
	if err == nil && a.Next == nil {
		c.advancesForNothing.Add(1)
	}
	if err == nil && c.failAdvanceAfterCommitOnce.CompareAndSwap(true, false) {
		return storage.QueueAdvanced{}, errors.New("connection reset by peer (injected, after the commit)")
	}
	if c.afterAdvance != nil && err == nil {
		c.afterAdvance(a)
	}
	return a, err
}

func (c *countingStore) OutboundHolds(ctx context.Context) ([]storage.OutboundHeld, error) {
	if c.failHolds.Load() {
		return nil, errors.New("injected: the database does not answer")
	}
	return c.Store.OutboundHolds(ctx)
}

func (c *countingStore) QueueGiveBack(ctx context.Context, p storage.QueueGiveBackParams) (int64, error) {
	n, err := c.Store.QueueGiveBack(ctx, p)
	c.givenBack.Add(n)
	return n, err
}

func (c *countingStore) QueueReleaseOwn(ctx context.Context, p storage.QueueReleaseOwnParams) (int64, error) {
	n, err := c.Store.QueueReleaseOwn(ctx, p)
	c.releasedOwn.Add(n)
	return n, err
}

// failFailureRecord reports whether a record of a failed send is to fail,
// counting it.
func (c *countingStore) failFailureRecord() bool {
	c.failureRecords.Add(1)
	if c.failFailureRecordOnce.CompareAndSwap(true, false) {
		c.failedFailureRecordAt.Store(time.Now().UnixNano())
		time.Sleep(failedRecordTakes) // the failure itself: a call that times out
		return true
	}
	return false
}

// failedRecordTakes is how long the record of a failed send that
// failFailureRecordOnce fails takes to fail. The lane's next step, which
// records it again, can come at once (a Wake in its mailbox), and the
// record made again must come well after the first try for a test to tell
// a backoff counted from that first try (3.2 to 4 s) from one counted from
// the record made again.
const failedRecordTakes = 1500 * time.Millisecond

func (c *countingStore) QueueRetry(ctx context.Context, p storage.QueueRetryParams) error {
	if c.failFailureRecord() {
		return errors.New("injected: database or disk is full")
	}
	return c.Store.QueueRetry(ctx, p)
}

func (c *countingStore) QueueHold(ctx context.Context, p storage.QueueHoldParams) error {
	if c.failFailureRecord() {
		return errors.New("injected: database or disk is full")
	}
	return c.Store.QueueHold(ctx, p)
}

func (c *countingStore) QueueDead(ctx context.Context, p storage.QueueDeadParams) error {
	if c.failFailureRecord() {
		return errors.New("injected: database or disk is full")
	}
	if c.loseNextDead.CompareAndSwap(true, false) {
		if err := c.Store.QueueRetry(ctx, storage.QueueRetryParams{Fence: p.Fence, Claim: p.Claim, Error: "lease ran out"}); err != nil {
			return err
		}
		return storage.ErrClaimLost
	}
	return c.Store.QueueDead(ctx, p)
}

// laneFixture is one HTTP destination "emr", a SQLite store holding rows of
// lane emr/P1, and a lane manager over them.
type laneFixture struct {
	ctx context.Context
	// cancel ends the fixture's term (Env.Ctx), as a demotion does; the
	// lanes' reports of it are expected from then on.
	cancel  context.CancelFunc
	store   *countingStore
	env     *Env
	system  *actor.ActorSystem
	manager *actor.PID
	// incarnation is the manager's latest incarnation, for the messages
	// that name it (rescanned.by).
	incarnation atomic.Pointer[Manager]
	ids         []int64
	// logs holds what the lanes and the manager log, at info and up.
	logs *logbuf.Buffer
}

// fixtureLane is the lane every fixture row is in.
const fixtureLane = "emr/P1"

// emrConfig is a config whose inbound adt_in routes to the outbound emr,
// whose table's keys after its name are outbound.
func emrConfig(t *testing.T, outbound string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:2575"

[[outbound]]
name = "emr"
`+outbound+`

[[route]]
from = "adt_in"
to = ["emr"]
`), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// migratedStore opens a SQLite store in a temporary directory, migrated,
// closed at the test's end.
func migratedStore(t *testing.T, ctx context.Context) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// newLaneFixture stores rows rows, then starts a manager whose destination
// "emr" posts to url; extra adds lines to the destination's config, and
// each of setup is applied to the store before the manager starts (hidden,
// gated): set afterwards, the manager's first rescan could list the lanes
// first.
func newLaneFixture(t *testing.T, url, extra string, rows int, setup ...func(*countingStore)) *laneFixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var endMu sync.Mutex
	ended := false
	t.Cleanup(func() { // runs before cancel
		endMu.Lock()
		ended = true
		endMu.Unlock()
	})
	cfg := emrConfig(t, "type = \"http\"\nurl = \""+url+"\"\n"+extra)
	st := migratedStore(t, ctx)
	end := func() {
		endMu.Lock()
		ended = true
		endMu.Unlock()
		cancel()
	}
	f := &laneFixture{ctx: ctx, cancel: end, store: &countingStore{Store: st}, system: actor.NewActorSystem(), logs: &logbuf.Buffer{}}
	f.ingest(t, rows)
	for _, set := range setup {
		set(f.store)
	}
	f.env = &Env{Ctx: ctx, Store: f.store, Owner: "test#1", Trust: func() bool { return !f.store.doubtOnce.Swap(false) }, Config: cfg,
		Log: zerolog.New(f.logs).Level(zerolog.InfoLevel), OnFenced: func(op string, err error) {
			// A lane still at work when the test returns fails on the
			// cancelled context, which is no fence; and a t.Error after
			// the test has ended panics the whole package's run.
			endMu.Lock()
			defer endMu.Unlock()
			if !ended {
				t.Errorf("fenced: %s: %v", op, err)
			}
		}}
	f.manager = f.system.Root.Spawn(newManager(f.env, f.incarnation.Store)) // its first rescan wakes the lane
	return f
}

// firstRescanAnswered waits until the manager has taken the answer of its
// first rescan, which lists the lanes. Its timer can fire late on a loaded
// machine: a test that changes the store under the manager's eyes must
// know which of its rescans saw the change.
func (f *laneFixture) firstRescanAnswered(t *testing.T) {
	t.Helper()
	waitUntil(t, "the manager's first rescan answered", 10*time.Second, func() bool { return f.inspect(t).rescans >= 1 })
}

// showLanesUntilParked lets QueueLanes answer again and moves the queue's
// version, as a restart or a failover makes the manager look afresh, then
// waits for a rescan that parks the fixture's lane.
func (f *laneFixture) showLanesUntilParked(t *testing.T) {
	t.Helper()
	f.store.hideLanes.Store(false)
	if _, err := f.store.ConfigVersionBump(f.ctx, storage.ConfigVersionBumpParams{Name: storage.QueueVersionName}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a rescan parking the lane", 20*time.Second, func() bool { return f.inspect(t).parked[fixtureLane] })
}

// hidden makes the fixture store's QueueLanes answer nothing, so that only
// Ingested (or the test) starts a lane. Set after the manager has started,
// a rescan that had checked it already could still list a row stored after.
func hidden(c *countingStore) { c.hideLanes.Store(true) }

// gated holds every QueueLanes call of the fixture's store at gate.
func gated(gate *chan struct{}) func(*countingStore) {
	return func(c *countingStore) { c.lanesGate.Store(gate) }
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

// headBackingOff stores a row in the fixture's lane that another node
// claimed and tried: it backs off for delay, and no actor of this node
// times it.
func (f *laneFixture) headBackingOff(t *testing.T, delay time.Duration) {
	t.Helper()
	f.ingest(t, 1)
	c, err := f.store.QueueClaimNext(f.ctx, storage.QueueClaimNextParams{Lane: fixtureLane, Owner: "another#1", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.QueueRetry(f.ctx, storage.QueueRetryParams{Claim: c.Claim(), Delay: delay, Error: "backing off"}); err != nil {
		t.Fatal(err)
	}
}

// acceptingEverySend is an HTTP destination that answers 200 to every
// request, and counts them.
func acceptingEverySend(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	requests := new(atomic.Int64)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	t.Cleanup(dest.Close)
	return dest, requests
}

// refusingTheFirstSend is an HTTP destination that answers 503 to its first
// request and 200 to every later one, and counts them.
func refusingTheFirstSend(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	requests := new(atomic.Int64)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the head is retried, or held
		}
	}))
	t.Cleanup(dest.Close)
	return dest, requests
}

// inspect asks the manager for its view of the lanes. The manager handles
// messages in order, so the view reflects every message sent to it before.
func (f *laneFixture) inspect(t *testing.T) view {
	t.Helper()
	got, err := f.system.Root.RequestFuture(f.manager, inspect{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	return got.(view)
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

// A delivering lane writes once per delivered row, and claims in runs: the
// write that records the last row of a run also claims the next row and
// claimAhead rows behind it (QueueAdvance); the rows of a run are recorded
// one by one (QueueComplete), each before the next is sent.
func TestALaneRecordsADeliveryAndClaimsTheNextInOneWrite(t *testing.T) {
	dest, requests := acceptingEverySend(t)
	const rows = 50
	f := newLaneFixture(t, dest.URL, "", rows)
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "every row delivered and recorded", 20*time.Second, func() bool {
		return requests.Load() == rows && f.row(t, rows-1).Status == storage.QueueDone
	})
	// The first row is claimed alone; each advance then claims a run.
	run := int64(claimAhead + 1)
	wantAdvances := 1 + (rows-1+run-1)/run
	if a, c := f.store.advances.Load(), f.store.completes.Load(); a+c != rows || a != wantAdvances {
		t.Fatalf("%d rows delivered with %d advances and %d completes; want one write per row, %d of them advances", rows, a, c, wantAdvances)
	}
	for i := range rows {
		if r := f.row(t, i); r.Status != storage.QueueDone || r.Attempts != 1 {
			t.Fatalf("row %d: %+v; want done at the first attempt", i, r)
		}
	}
	// The first claim; any more are the manager's rescans finding nothing.
	if n := f.store.claims.Load(); n < 1 || n > 1+int64(20*time.Second/RescanInterval) {
		t.Fatalf("%d separate claims for one lane's %d rows", n, rows)
	}
}

// When a row taken from a run fails and backs off, the rows claimed behind
// it are given back at once, as if never claimed (attempt 0): they wait
// behind it pending, not in flight under a lease, and do not use up
// attempts they never made. Then every row is delivered, in order.
func TestALaneGivesBackTheRowsAheadOfAFailedRow(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string
	)
	requests := new(atomic.Int64)
	// The lane's claim once the backoff (about a second) ends waits at
	// this gate until the rows behind the failed one are checked: taken
	// again in a run, they are in flight, and a test goroutine slowed for
	// a second on a loaded machine read them so.
	var store *countingStore
	gate := make(chan struct{})
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 3 { // the third row, taken from a run
			store.claimGate.Store(&gate)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		order = append(order, r.Header.Get(HeaderQueueID))
		mu.Unlock()
	}))
	defer dest.Close()
	const rows = 10
	f := newLaneFixture(t, dest.URL, "retry_base_seconds = 1", rows, func(c *countingStore) { store = c })
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "the third row backing off", 20*time.Second, func() bool {
		r := f.row(t, 2)
		return r.Status == storage.QueuePending && r.Attempts == 1 && r.LastError != ""
	})
	for i := 3; i <= claimAhead+1 && i < rows; i++ {
		if r := f.row(t, i); r.Status != storage.QueuePending || r.Attempts != 0 || r.LeaseOwner != "" {
			t.Fatalf("row %d, claimed behind the failed row: %+v; want given back (pending, attempt 0)", i, r)
		}
	}
	close(gate)
	waitUntil(t, "every row delivered", 20*time.Second, func() bool {
		return f.row(t, rows-1).Status == storage.QueueDone
	})
	mu.Lock()
	defer mu.Unlock()
	want := make([]string, rows)
	for i, id := range f.ids {
		want[i] = strconv.FormatInt(id, 10)
	}
	if !slices.Equal(order, want) {
		t.Fatalf("delivered in the order %v; want %v", order, want)
	}
	for i := range rows {
		if r, want := f.row(t, i), int64(1+btoi(i == 2)); r.Attempts != want {
			t.Fatalf("row %d: %d attempts, want %d", i, r.Attempts, want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A lane that delivers the newest row the manager told it of records the
// delivery with a completion alone: by FIFO there is no next row to look
// for. A row stored later comes with its own Wake, and a lane told of a
// newer row than the one it delivers claims that one in the same write.
func TestALaneDeliveringItsNewestRowDoesNotLookForANext(t *testing.T) {
	dest, requests := acceptingEverySend(t)
	// Only Ingested starts the lane: a lane started by a rescan does not
	// know its newest row, and looks for a next one after every delivery.
	f := newLaneFixture(t, dest.URL, "", 0, hidden)
	defer f.system.Root.Stop(f.manager)

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
	// The first of the two is not the newest: its delivery is recorded by
	// an advance that claims the second, or, when the lane claimed the
	// second ahead with the first (a slow send), by a completion. Either
	// way one write a row, and none that looked for a row and found none.
	a, c, none := f.store.advances.Load(), f.store.completes.Load(), f.store.advancesForNothing.Load()
	if a+c != 5 || none != 0 {
		t.Fatalf("2 rows stored together: %d advances (%d finding no next row) and %d completes in all, want 5 writes, none finding no next row", a, none, c)
	}
}

// A lane whose actor stopped when it ran dry starts its next actor's head
// lookup where the last one was (QueueClaimNextParams.From), not at the
// lane's first index entry: under light traffic a lane stops after nearly
// every row, and on PostgreSQL a lookup from 0 walks the entries of every
// row the lane finished since the last vacuum.
func TestARestartedLaneKeepsItsFloor(t *testing.T) {
	dest, requests := acceptingEverySend(t)
	// only Ingested starts the lane
	f := newLaneFixture(t, dest.URL, "", 0, hidden)
	defer f.system.Root.Stop(f.manager)

	for i := range 3 {
		f.ingest(t, 1)
		f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[i]}})
		waitUntil(t, "the row delivered and the lane's actor stopped", 20*time.Second, func() bool {
			_, running := f.inspect(t).wakes[fixtureLane]
			return requests.Load() == int64(i+1) && f.row(t, i).Status == storage.QueueDone && !running
		})
	}
	if got := f.store.floorsOf(f.ids[0]); len(got) != 1 || got[0] != 0 {
		t.Fatalf("the lane's first claim started at %v, want [0]", got)
	}
	for i := 1; i < 3; i++ {
		if got := f.store.floorsOf(f.ids[i]); len(got) != 1 || got[0] != f.ids[i-1] {
			t.Fatalf("row %d was claimed by a new actor starting at %v; want [%d], the row its predecessor claimed", f.ids[i], got, f.ids[i-1])
		}
	}
}

// A lane woken while its head backs off (a Wake for a newly stored row)
// claims nothing: the new row queues behind the head. It stays, and its own
// timer claims the head again when due, starting the head lookup at that row
// (QueueClaimNextParams.From). (It used to go idle, be stopped, and leave the
// retry to the manager's next rescan; later it looked, and with a
// destination down every stored message cost a claim that found nothing.)
func TestALaneWokenDuringABackoffRetriesOnItsOwnTimer(t *testing.T) {
	dest, requests := refusingTheFirstSend(t)
	// only Ingested wakes the lane
	f := newLaneFixture(t, dest.URL, "retry_base_seconds = 0.5\nretry_max_seconds = 0.5", 0, hidden)
	defer f.system.Root.Stop(f.manager)
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}})

	waitUntil(t, "the first send refused", 20*time.Second, func() bool { return requests.Load() == 1 })
	// Handled by the lane after its retry is recorded: the head is backing off.
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}})
	waitUntil(t, "both rows delivered", 20*time.Second, func() bool {
		return requests.Load() == 3 && f.row(t, 1).Status == storage.QueueDone
	})
	if nothing := f.store.floorsOf(noWork); len(nothing) != 0 {
		t.Fatalf("%d claims found nothing (from %v): the Wake during the backoff was looked into", len(nothing), nothing)
	}
	// The first claim knows no floor; the retry is the same lane actor's.
	if got := f.store.floorsOf(f.ids[0]); len(got) != 2 || got[0] != 0 || got[1] != f.ids[0] {
		t.Fatalf("claims of the retried head came from %v; want [0 %d]", got, f.ids[0])
	}
}

// A lane whose send wrote nothing (the destination unreachable) waits for
// its timer like a lane backing off: a Wake for a newly stored row claims
// nothing, and the lane offers its place instead. Before, every message
// stored during an outage cost a claim and a give-back.
func TestALaneWhoseSendWroteNothingIsNotClaimedAgainByAWake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "http://" + ln.Addr().String() // refused once closed
	ln.Close()
	// The wait (retry_base_seconds) outlasts the test: only a Wake could claim.
	f := newLaneFixture(t, unreachable, "retry_base_seconds = 3600\nretry_max_seconds = 3600", 0, hidden)
	defer f.system.Root.Stop(f.manager)
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[0]}})
	waitUntil(t, "the head given back unsent", 20*time.Second, func() bool {
		r := f.row(t, 0)
		return f.store.claims.Load() == 1 && r.Status == storage.QueuePending && r.LastError != ""
	})
	// The failed send's own offer of the lane's place, which no lane
	// waiting for one takes, comes first: counted, it is not taken below
	// for the Wake's answer.
	waitUntil(t, "the lane's offer of its place after the failed send", 20*time.Second, func() bool { return f.inspect(t).declined == 1 })
	claims, idles := f.store.claims.Load(), f.inspect(t).idles
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[1]}})
	// The Wake's answer, once the lane has handled it to its end (a claim
	// it made, and the give-back of a send that failed, come before): its
	// offer to yield, an idle of the Wake's count.
	waitUntil(t, "the lane's offer of its place after the Wake", 20*time.Second, func() bool { return f.inspect(t).idles > idles })
	if n := f.store.claims.Load(); n != claims {
		t.Fatalf("%d claims for a row stored behind a head that could not be sent; want none before the head's timer", n-claims)
	}
}

// A head backing off is claimed at once when a rescan finds it claimable
// again, as after an operator's retry (POST /queue/{id}/retry), not when its
// backoff ends.
func TestALaneBackingOffTakesAnOperatorsRetryAtTheNextRescan(t *testing.T) {
	dest, requests := refusingTheFirstSend(t)
	f := newLaneFixture(t, dest.URL, "retry_base_seconds = 3600\nretry_max_seconds = 3600", 2)
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "the head backing off", 20*time.Second, func() bool {
		r := f.row(t, 0)
		return r.Status == storage.QueuePending && r.Attempts == 1
	})
	if _, err := f.store.QueueRelease(f.ctx, storage.QueueReleaseParams{ID: f.ids[0]}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "both rows delivered", 20*time.Second, func() bool {
		return requests.Load() == 3 && f.row(t, 1).Status == storage.QueueDone
	})
}

// A lane whose head is held for an operator starts no actor for rows stored
// behind it: a claim could take nothing there. The operator's retry, found
// by the next rescan, delivers them all.
func TestAHeldLaneStartsNoActorUntilAnOperatorActs(t *testing.T) {
	dest, requests := refusingTheFirstSend(t)
	// No rescan sees the lane, so only the lane's own word parks it.
	f := newLaneFixture(t, dest.URL, "max_attempts = 1", 0, hidden)
	defer f.system.Root.Stop(f.manager)
	// Answered after the park, the first rescan would drop it: rightly in
	// an engine, where it would have seen the held head and parked the
	// lane again, but here it sees nothing.
	f.firstRescanAnswered(t)
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}})
	lanes := func() map[string]int { return f.inspect(t).wakes }
	waitUntil(t, "the head held and its lane stopped", 20*time.Second, func() bool {
		_, running := lanes()[fixtureLane]
		return f.row(t, 0).Held && !running
	})

	claims := f.store.claims.Load()
	f.ingest(t, 2)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[2]}})
	// Handled in order: the inspect sees what the Ingested did.
	if wakes, running := lanes()[fixtureLane]; running {
		t.Fatalf("rows stored behind a held head started the lane (%d Wakes)", wakes)
	}
	if n := f.store.claims.Load(); n != claims {
		t.Fatalf("%d claims for rows behind a held head", n-claims)
	}

	if _, err := f.store.QueueRelease(f.ctx, storage.QueueReleaseParams{ID: f.ids[0]}); err != nil {
		t.Fatal(err)
	}
	f.store.hideLanes.Store(false)
	waitUntil(t, "every row delivered after the retry", 20*time.Second, func() bool {
		return requests.Load() == 4 && f.row(t, 2).Status == storage.QueueDone
	})
}

// An operator's retry of a head held after max_attempts gives it
// max_attempts more: a failure after the retry is retried, not held again
// at once (the row's attempts, a total, were already at the limit).
func TestAnOperatorsRetryGivesAHeldHeadAFreshSetOfAttempts(t *testing.T) {
	requests := new(atomic.Int64)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) <= 3 { // both attempts, and the first after the retry
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(dest.Close)
	f := newLaneFixture(t, dest.URL, "max_attempts = 2\nretry_base_seconds = 0.1\nretry_max_seconds = 0.1", 1)
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "the head held after its 2 attempts", 20*time.Second, func() bool {
		r := f.row(t, 0)
		return r.Held && r.Attempts == 2
	})
	if _, err := f.store.QueueRelease(f.ctx, storage.QueueReleaseParams{ID: f.ids[0]}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the retried head delivered or held again", 20*time.Second, func() bool {
		r := f.row(t, 0)
		return r.Status == storage.QueueDone || r.Held
	})
	if r := f.row(t, 0); r.Status != storage.QueueDone || r.Attempts != 4 {
		t.Fatalf("after the operator's retry: status %s, held %v, attempts %d after %d sends; want done at attempt 4 (the retry gives 2 more)",
			r.Status, r.Held, r.Attempts, requests.Load())
	}
}

// A rescan parks a lane without an actor whose head is held (as after a
// restart or a failover, when no lane actor remembers it): rows stored
// behind it start no actor.
func TestARescanParksALaneWhoseHeadIsHeld(t *testing.T) {
	dest, _ := acceptingEverySend(t)
	f := newLaneFixture(t, dest.URL, "", 0, hidden)
	defer f.system.Root.Stop(f.manager)
	f.ingest(t, 1)
	c, err := f.store.QueueClaimNext(f.ctx, storage.QueueClaimNextParams{Lane: fixtureLane, Owner: "test#1", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.QueueHold(f.ctx, storage.QueueHoldParams{Claim: c.Claim(), Error: "held by the test"}); err != nil {
		t.Fatal(err)
	}
	// The manager has looked at every lane already (and seen none): the
	// queue's version moving makes it look again.
	f.showLanesUntilParked(t)

	claims := f.store.claims.Load()
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[1]}})
	if v := f.inspect(t); v.wakes[fixtureLane] != 0 {
		t.Fatalf("a row stored behind a held head started the lane: %+v", v)
	}
	if n := f.store.claims.Load(); n != claims {
		t.Fatalf("%d claims for a row behind a held head", n-claims)
	}
}

// A lane stopped on a clean shutdown, holding a row it claimed but has not
// sent, gives the row back: pending again, its attempt taken back, not
// stranded in flight until its lease runs out.
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
	if r.Status != storage.QueuePending || r.LeaseOwner != "" || r.Attempts != 0 {
		t.Fatalf("the row claimed but not sent at the stop: %+v, want pending again, its attempt taken back", r)
	}
	if r := f.row(t, 2); r.Status != storage.QueuePending || r.Attempts != 0 {
		t.Fatalf("the third row: %+v, want untouched", r)
	}
}

// idleRecorder stands in for the manager as a lane actor's parent: it
// passes Wakes on to the lane and hands the lane's idles to the test.
type idleRecorder struct {
	lane  *actor.Props
	pid   *actor.PID
	idles chan idle
	// ref is the lane's flags, as the manager would hold them, and parent
	// the recorder's own PID (runLane).
	ref    *laneRef
	parent *actor.PID
}

// runLane runs a lane actor of the fixture's lane on env, dest and sender,
// outside any manager, under an idleRecorder, which it returns; the lane
// stops at the test's cleanup.
func (f *laneFixture) runLane(t *testing.T, env *Env, dest config.Outbound, sender Sender) *idleRecorder {
	t.Helper()
	ref := &laneRef{}
	rec := &idleRecorder{idles: make(chan idle, 4), ref: ref, lane: actor.PropsFromProducer(func() actor.Actor {
		return &laneActor{lane: fixtureLane, dest: dest, sender: sender, env: env, queued: &ref.queued, newest: &ref.newest, claimable: &ref.claimable}
	})}
	rec.parent = f.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return rec }))
	t.Cleanup(func() { f.system.Root.Stop(rec.parent) })
	return rec
}

func (r *idleRecorder) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		r.pid = ctx.Spawn(r.lane)
	case Wake:
		ctx.Send(r.pid, msg)
	case idle:
		r.idles <- msg
	}
}

// A lane that held its head says so in every idle until it has a row in
// hand again, not only in the first. The manager ignores an idle sent
// before the lane took a Wake still in its mailbox (here the Wake comes
// after the lane's first step, as it can in an engine), and it parks the
// lane only on an idle that says held: without it, every row stored behind
// the held head started an actor whose claim found nothing.
func TestALaneThatHeldItsHeadSaysSoUntilItHasARowAgain(t *testing.T) {
	dest, requests := refusingTheFirstSend(t)
	// the manager's rescans leave the lane alone
	f := newLaneFixture(t, dest.URL, "max_attempts = 1", 0, hidden)
	defer f.system.Root.Stop(f.manager)
	f.ingest(t, 1)
	o := f.env.Config.Outbound[0]
	sender, err := NewSender(o)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	rec := f.runLane(t, f.env, o, sender)
	next := func(what string) idle {
		t.Helper()
		select {
		case i := <-rec.idles:
			return i
		case <-time.After(20 * time.Second):
			t.Fatalf("no idle from the lane after %s", what)
			return idle{}
		}
	}

	if i := next("its first step"); !i.held || i.wakes != 0 {
		t.Fatalf("after holding its head: %+v; want held, with no Wake taken", i)
	}
	rec.ref.queued.Store(true)
	f.system.Root.Send(rec.parent, Wake{})
	if i := next("a Wake that came after its first step"); !i.held || i.wakes != 1 {
		t.Fatalf("after a claim behind its held head: %+v; want still held, with the Wake taken", i)
	}

	if _, err := f.store.QueueRelease(f.ctx, storage.QueueReleaseParams{ID: f.ids[0]}); err != nil {
		t.Fatal(err)
	}
	rec.ref.queued.Store(true)
	rec.ref.claimable.Store(true) // as from the rescan that found the head claimable again
	f.system.Root.Send(rec.parent, Wake{})
	if i := next("the operator's retry"); i.held {
		t.Fatalf("after delivering the released head: %+v; want no longer held", i)
	}
	if requests.Load() != 2 || f.row(t, 0).Status != storage.QueueDone {
		t.Fatalf("the released head: %d sends, row %+v; want delivered at the second send", requests.Load(), f.row(t, 0))
	}
}

// unwrittenTwice fails its first two Sends as the MLLP sender does when no
// connection came free in time, writing nothing, its third as a written
// send the destination did not accept, and delivers after that.
type unwrittenTwice struct{ sends atomic.Int32 }

func (u *unwrittenTwice) Send(context.Context, Outgoing) error {
	switch u.sends.Add(1) {
	case 1, 2:
		return retryableError(errNotWritten, "mllp emr: no free connection; not sent")
	case 3:
		return retryableError(nil, "mllp emr: answered AE")
	}
	return nil
}

func (*unwrittenTwice) Close() error { return nil }

// Sends that wrote nothing are no attempts: with max_attempts = 2 and
// on_exhausted = "dead", lanes waiting for a destination's shared
// connections set their messages aside after one real attempt, or none.
func TestASendThatWroteNothingUsesUpNoAttempt(t *testing.T) {
	f := newLaneFixture(t, "http://127.0.0.1:1/unused", "max_attempts = 2\non_exhausted = \"dead\"\nretry_base_seconds = 0.05", 1, hidden)
	defer f.system.Root.Stop(f.manager)
	sender := &unwrittenTwice{}
	f.runLane(t, f.env, f.env.Config.Outbound[0], sender)
	waitUntil(t, "the row finished", 20*time.Second, func() bool {
		st := f.row(t, 0).Status
		return st == storage.QueueDone || st == storage.QueueDead
	})
	if r := f.row(t, 0); r.Status != storage.QueueDone || r.Attempts != 2 || sender.sends.Load() != 4 {
		t.Fatalf("row %s, %d attempts, after %d sends; want done at the fourth send, 2 attempts (the first two wrote nothing)", r.Status, r.Attempts, sender.sends.Load())
	}
}

// A dial that fails writes nothing of the message either: no attempt.
// Counted, a receiver down for a few dials (a restart, a network blip) used
// up max_attempts and, with on_exhausted = "dead", set every head aside in
// turn while it was down; with "block", held each lane for an operator.
// The lane waits for the sender's next dial instead, and the head's last
// error says why it waits (GET /lanes shows it).
func TestAFailedDialUsesUpNoAttempt(t *testing.T) {
	f := newLaneFixture(t, "http://127.0.0.1:1/unused", "", 1, hidden)
	defer f.system.Root.Stop(f.manager)
	r := startReceiver(t, nil, nil)
	o := mllpOutbound(r.addr)
	o.Name = f.env.Config.Outbound[0].Name
	o.MaxAttempts, o.OnExhausted = 2, config.ExhaustedDead
	s := newTestMLLPSender(t, o)
	var dials atomic.Int64
	var up atomic.Bool
	realDial := s.dial
	s.dial = func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		if !up.Load() {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
		}
		return realDial(ctx)
	}
	f.runLane(t, f.env, o, s)
	// The head is read once, while it waits: the lane claims it again for
	// each dial, and a claimed row counts the attempt it may make.
	var waiting storage.QueueRow
	waitUntil(t, "three failed dials, the head waiting", 20*time.Second, func() bool {
		waiting = f.row(t, 0)
		return dials.Load() >= 3 && waiting.Status == storage.QueuePending
	})
	if waiting.Attempts != 0 || !strings.Contains(waiting.LastError, "connection refused") {
		t.Fatalf("after %d failed dials: row %s, %d attempts, last error %q; want pending, no attempt, the dial's error", dials.Load(), waiting.Status, waiting.Attempts, waiting.LastError)
	}
	up.Store(true)
	waitUntil(t, "the row finished", 20*time.Second, func() bool {
		st := f.row(t, 0).Status
		return st == storage.QueueDone || st == storage.QueueDead
	})
	if row := f.row(t, 0); row.Status != storage.QueueDone || row.Attempts != 1 {
		t.Fatalf("row %s, %d attempts once the receiver is up; want done, 1 attempt (the failed dials wrote nothing)", row.Status, row.Attempts)
	}
}

// doubtAtTheWrite is a sender whose leadership falls in doubt at its first
// Send while it waits for a connection, after the lane's check: it asks
// Outgoing.MayWrite at the last moment, as the real senders do, and writes
// nothing when told no.
type doubtAtTheWrite struct {
	doubt      func()
	sends      atomic.Int32
	distrusted atomic.Int32
	mu         sync.Mutex
	wrote      []int64 // queue ids, in the order written
}

func (d *doubtAtTheWrite) Send(_ context.Context, m Outgoing) error {
	if d.sends.Add(1) == 1 {
		d.doubt()
	}
	if !m.mayWrite() {
		d.distrusted.Add(1)
		return distrusted("test", "emr", m)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.wrote = append(d.wrote, m.QueueID)
	return nil
}

func (*doubtAtTheWrite) Close() error { return nil }

// A send that found leadership in doubt at its last moment (Outgoing.MayWrite)
// wrote nothing: the row goes back, still the lane's head, with no attempt,
// and the lane delivers it once trusted again, before the rows behind it.
// Checked only before the send, a process frozen while its send waited for
// a connection wrote, on waking, a row the next leader had delivered with
// the rows behind it.
func TestALaneWhoseSendFindsLeadershipInDoubtAtTheWriteKeepsItsHead(t *testing.T) {
	const rows = 3
	f := newLaneFixture(t, "http://127.0.0.1:1/unused", "", rows, hidden)
	defer f.system.Root.Stop(f.manager)
	sender := &doubtAtTheWrite{doubt: func() { f.store.doubtOnce.Store(true) }}
	rec := f.runLane(t, f.env, f.env.Config.Outbound[0], sender)
	// As the manager does for a lane it was told has rows: woken at each idle.
	for f.row(t, rows-1).Status != storage.QueueDone {
		select {
		case <-rec.idles:
			rec.ref.queued.Store(true)
			f.system.Root.Send(rec.parent, Wake{})
		case <-time.After(20 * time.Second):
			t.Fatalf("no idle from the lane in 20 s, and row %d is %s", rows-1, f.row(t, rows-1).Status)
		}
	}
	sender.mu.Lock()
	wrote := slices.Clone(sender.wrote)
	sender.mu.Unlock()
	if n := sender.distrusted.Load(); n != 1 || !slices.Equal(wrote, f.ids) {
		t.Fatalf("%d sends stopped at the write, wrote %v; want 1 stopped, then %v in order", n, wrote, f.ids)
	}
	for i := range rows {
		if r := f.row(t, i); r.Status != storage.QueueDone || r.Attempts != 1 {
			t.Fatalf("row %d: %s after %d attempts; want done after 1 (the stopped send wrote nothing)", i, r.Status, r.Attempts)
		}
	}
}

// notDueYet fails its first Send as the MLLP sender does while its dial
// backs off (nothing written, the next dial due in a while), and delivers
// after that, recording when each Send came.
type notDueYet struct {
	mu    sync.Mutex
	sends []time.Time
}

func (n *notDueYet) Send(context.Context, Outgoing) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sends = append(n.sends, time.Now())
	if len(n.sends) == 1 {
		de := retryableError(errNotWritten, "mllp emr: unreachable; next dial allowed in 1.5s; not sent")
		de.RetryAfter = 1500 * time.Millisecond
		return de
	}
	return nil
}

func (*notDueYet) Close() error { return nil }

func (n *notDueYet) times() []time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]time.Time(nil), n.sends...)
}

// A send that wrote nothing because the destination's next dial is not due
// yet is tried again when it is, not after retry_base_seconds: the lanes of
// an unreachable receiver polled it (a claim and a give back each) every
// base delay for as long as the dial backed off.
func TestASendThatWroteNothingWaitsForTheNextDial(t *testing.T) {
	f := newLaneFixture(t, "http://127.0.0.1:1/unused", "retry_base_seconds = 0.05", 1, hidden)
	defer f.system.Root.Stop(f.manager)
	sender := &notDueYet{}
	f.runLane(t, f.env, f.env.Config.Outbound[0], sender)
	waitUntil(t, "the row delivered", 20*time.Second, func() bool { return f.row(t, 0).Status == storage.QueueDone })
	sends := sender.times()
	if len(sends) != 2 {
		t.Fatalf("%d sends, want 2", len(sends))
	}
	if gap := sends[1].Sub(sends[0]); gap < 1400*time.Millisecond {
		t.Fatalf("tried again %v after a send whose next dial was due in 1.5s; want no sooner", gap)
	}
	if r := f.row(t, 0); r.Attempts != 1 {
		t.Fatalf("%d attempts recorded, want 1 (the send that wrote nothing is none)", r.Attempts)
	}
}

// A timer's due that was already in the lane's mailbox when its timer was
// cancelled (time.AfterFunc had fired; Stop cannot take the message back)
// is stale: it must not stand for the timer that replaced it. Here a lane
// whose head backs off gets such a due, as when a pause's timer (after a
// store failure, a send that wrote nothing, leadership in doubt) fires
// during a send that then fails and schedules the backoff. Taken as the
// backoff's own, it made the lane claim a head not yet due, find nothing,
// forget its real timer and go idle: the manager stopped it, unparked, and
// the head waited for a full rescan instead of its backoff.
func TestAStaleDueDoesNotEndALanesBackoff(t *testing.T) {
	dest, requests := refusingTheFirstSend(t)
	// only Ingested and the lane's own timer wake the lane
	f := newLaneFixture(t, dest.URL, "retry_base_seconds = 3\nretry_max_seconds = 3", 0, hidden)
	defer f.system.Root.Stop(f.manager)
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[0]}})

	waitUntil(t, "the first send refused and its retry recorded", 20*time.Second, func() bool {
		r := f.row(t, 0)
		return requests.Load() == 1 && r.Status == storage.QueuePending && r.Attempts == 1
	})
	// The lane sets its backoff timer in the step that recorded the retry:
	// this due reaches it after that, as a timer message already queued.
	f.system.Root.Send(f.inspect(t).pids[fixtureLane], due{})

	waitUntil(t, "the head delivered when its backoff ends", 20*time.Second, func() bool {
		return requests.Load() == 2 && f.row(t, 0).Status == storage.QueueDone
	})
	if nothing := f.store.floorsOf(noWork); len(nothing) != 0 {
		t.Fatalf("%d claims found nothing: the stale due was taken for the backoff's end", len(nothing))
	}
}

// A lane actor that panics is stopped and the manager starts the lane
// afresh: the lane's row is delivered, and once the lane runs dry its actor
// is stopped as any other. (Restarted in place by protoactor's default
// supervision, the new actor counted its Wakes from 0, so its idle never
// matched the manager's count and it was never stopped; nor was a lane that
// then held its head ever parked.)
func TestALaneThatPanickedIsStartedAfreshAndStopsWhenDrained(t *testing.T) {
	dest, requests := acceptingEverySend(t)
	// only Ingested (and the manager's restart) starts the lane
	f := newLaneFixture(t, dest.URL, "", 0, hidden)
	defer f.system.Root.Stop(f.manager)
	f.store.panicOnce.Store(true)
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[0]}})

	waitUntil(t, "the row delivered after the lane's panic", 20*time.Second, func() bool {
		return requests.Load() == 1 && f.row(t, 0).Status == storage.QueueDone
	})
	if f.store.panicOnce.Load() {
		t.Fatal("the injected panic never happened")
	}
	waitUntil(t, "the drained lane's actor stopped", 20*time.Second, func() bool {
		_, running := f.inspect(t).wakes[fixtureLane]
		return !running
	})
	// The lane works as any other afterwards.
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[1]}})
	waitUntil(t, "the next row delivered and the lane's actor stopped", 20*time.Second, func() bool {
		_, running := f.inspect(t).wakes[fixtureLane]
		return requests.Load() == 2 && f.row(t, 1).Status == storage.QueueDone && !running
	})
}

// A lane actor that panics with a row in hand (here after its send, before
// the delivery is recorded) gives the row back as it stops: the lane's fresh
// actor sends it again a restart pause later, not once the row's lease (a
// minute) has run out, with every row of the lane waiting behind it.
func TestALaneThatPanickedWithARowInHandGivesItBack(t *testing.T) {
	dest, requests := acceptingEverySend(t)
	f := newLaneFixture(t, dest.URL, "", 0, hidden)
	defer f.system.Root.Stop(f.manager)
	f.store.panicCompleteOnce.Store(true)
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[0]}})

	waitUntil(t, "the row sent again and recorded after the lane's panic", 20*time.Second, func() bool {
		return requests.Load() == 2 && f.row(t, 0).Status == storage.QueueDone
	})
	if f.store.panicCompleteOnce.Load() {
		t.Fatal("the injected panic never happened")
	}
	if n := f.store.givenBack.Load(); n != 1 {
		t.Fatalf("%d rows given back, want the one in hand", n)
	}
}

// While the database is away every lane's store call fails and is tried
// again each second; each failure was an ERROR line, one a second per lane
// (a thousand lanes: a thousand lines a second). The lanes' failures are
// logged when they start, once a minute while they last, and when a call
// works again, with how many there were.
func TestALanesStoreFailuresAreLoggedWhenTheyStartAndEnd(t *testing.T) {
	dest, requests := acceptingEverySend(t)
	f := newLaneFixture(t, dest.URL, "", 0, hidden)
	defer f.system.Root.Stop(f.manager)
	f.store.refuseClaims.Store(true)
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[0]}})
	waitUntil(t, "three failed claims", 20*time.Second, func() bool { return f.store.claims.Load() >= 3 })
	f.store.refuseClaims.Store(false)
	waitUntil(t, "the row delivered once the database is back", 20*time.Second, func() bool {
		return requests.Load() == 1 && f.row(t, 0).Status == storage.QueueDone
	})
	if n := strings.Count(f.logs.String(), "store call failed"); n != 1 {
		t.Fatalf("%d failed claims a second apart logged %d times, want once:\n%s", f.store.claims.Load()-1, n, f.logs.String())
	}
	if !strings.Contains(f.logs.String(), "the lanes' store calls work again") {
		t.Fatalf("no line says the store calls work again:\n%s", f.logs.String())
	}
}

// hangingSender holds every Send until its context ends, as a destination
// that does not answer, and fails it then, as the senders do.
type hangingSender struct{ inHand chan struct{} }

func (h *hangingSender) Send(ctx context.Context, _ Outgoing) error {
	h.inHand <- struct{}{}
	<-ctx.Done()
	return retryableError(ctx.Err(), "http emr: no answer")
}

func (*hangingSender) Close() error { return nil }

// deliveries reads mf_deliveries_total of destination emr by result.
func deliveries(result string) uint64 {
	return metrics.GetOrCreateCounter(fmt.Sprintf(`mf_deliveries_total{destination="emr",result=%q}`, result)).Get()
}

// A send that the end of the term cancels (a demotion, a fence) is
// abandoned, not failed by the destination: mf_deliveries_total counts
// nothing for it. Counted as a retry, every failover during a send raised
// the destination's failure rate. (Not parallel: the counter is the
// process's.)
func TestASendAbandonedByADemotionIsNotADeliveryFailure(t *testing.T) {
	f := newLaneFixture(t, "http://127.0.0.1:1/unused", "", 1, hidden)
	defer f.system.Root.Stop(f.manager)
	term, endTerm := context.WithCancel(f.ctx)
	defer endTerm()
	ended := make(chan string, 1)
	env := Env{Ctx: term, Store: f.env.Store, Fence: f.env.Fence, Owner: f.env.Owner, Trust: f.env.Trust, Config: f.env.Config,
		Log: f.env.Log, OnFenced: func(op string, _ error) { ended <- op }}
	sender := &hangingSender{inHand: make(chan struct{}, 1)}
	f.runLane(t, &env, env.Config.Outbound[0], sender)
	select {
	case <-sender.inHand:
	case <-time.After(20 * time.Second):
		t.Fatal("the lane never sent its row")
	}
	results := []string{"delivered", "retry", "dead", "blocked"}
	before := make([]uint64, len(results))
	for i, r := range results {
		before[i] = deliveries(r)
	}
	endTerm()
	select {
	case <-ended: // the lane is done with the send by then
	case <-time.After(20 * time.Second):
		t.Fatal("the lane never reported the term's end")
	}
	for i, r := range results {
		if n := deliveries(r) - before[i]; n != 0 {
			t.Errorf(`mf_deliveries_total{result=%q} rose by %d on a send the demotion abandoned; want 0`, r, n)
		}
	}
}

// A destination that answers 503 or 429 with Retry-After has said when it
// can take the message again: the lane waits that long (up to
// retry_max_seconds), not its own first backoff, which sent the message
// back within the second, again and again, and with max_attempts used the
// attempts up while the destination had asked to be left alone.
func TestALaneWaitsAsLongAsTheDestinationsRetryAfter(t *testing.T) {
	requests := new(atomic.Int64)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer dest.Close()
	f := newLaneFixture(t, dest.URL, "retry_base_seconds = 0.05\nretry_max_seconds = 300", 1)
	defer f.system.Root.Stop(f.manager)

	waitUntil(t, "the refused send's retry recorded", 20*time.Second, func() bool {
		r := f.row(t, 0)
		return r.Status == storage.QueuePending && r.Attempts == 1 && r.LastError != ""
	})
	r := f.row(t, 0)
	if wait := r.NextAttemptAt.Sub(r.UpdatedAt); wait < 100*time.Second {
		t.Fatalf("the retry is due %v after the refusal (%d requests); want the destination's Retry-After, 120s", wait, requests.Load())
	}
}

// While a destination is down, every lane with work retries its head with
// backoff: each failed attempt was a WARN line, so a receiver down for an
// hour, with a lane per patient, wrote a line per lane at every retry
// (1,000 lanes at retry_max_seconds' 5 minutes: 12,000 an hour, and many
// more as the backoff grows). The destination's failures are logged when
// they start, once a minute while they last, with how many there were, and
// when a delivery works again; each attempt is a DEBUG line, and each
// lane's last error is in GET /lanes.
func TestADestinationsFailuresAreLoggedWhenTheyStartAndEnd(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	var requests atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer dest.Close()
	f := newLaneFixture(t, dest.URL, "retry_base_seconds = 0.02\nretry_max_seconds = 0.05", 0, hidden)
	defer f.system.Root.Stop(f.manager)
	const lanes = 20
	in := Ingested{}
	for i := range lanes {
		lane := fmt.Sprintf("emr/P%d", i)
		res, err := f.store.MessageIngest(f.ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
			Inbound: "adt_in", ControlID: "C", Payload: []byte("MSH|^~\\&|A|B|C|D|20261126||ADT^A01|C|P|2.5.1\r"),
			Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "emr", Lane: lane}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		in.Lanes, in.Newest = append(in.Lanes, lane), append(in.Newest, res[0].QueueIDs[0])
	}
	f.system.Root.Send(f.manager, in)
	waitUntil(t, "ten failed attempts a lane", 30*time.Second, func() bool { return requests.Load() >= 10*lanes })
	down.Store(false)
	waitUntil(t, "every lane delivered once the destination is back", 30*time.Second, func() bool {
		stats, err := f.store.QueueStats(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range stats {
			if st.Status != storage.QueueDone && st.Count > 0 {
				return false
			}
		}
		return true
	})
	logs := f.logs.String()
	if n := strings.Count(logs, `"level":"warn"`); n != 1 || strings.Count(logs, "work again") != 1 {
		lines := strings.SplitAfter(logs, "\n")
		t.Fatalf("%d failed attempts logged in %d WARN lines, want one, and one when the destination works again:\n%s",
			requests.Load()-lanes, n, strings.Join(lines[max(0, len(lines)-4):], ""))
	}
}

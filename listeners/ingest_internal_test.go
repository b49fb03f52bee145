package listeners

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// A message handed to the ingest actor after it has stopped is a dead
// letter: its sender is told so (ErrShuttingDown, an AE) as soon as the actor
// has stopped, instead of waiting for an answer that never comes (it waited
// out the listener's Grace, 5 s, and held up a clean switchover by as much).
// An answer already given still wins.
func TestASubmitAfterTheIngestActorStoppedIsAnswered(t *testing.T) {
	sys := actor.NewActorSystem()
	env := &Env{Ctx: context.Background(), Log: zerolog.Nop(), System: sys}
	pid := sys.Root.Spawn(NewIngest(env))
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}

	late := make(chan Result, 1)
	sys.Root.Send(pid, Submit{Reply: late})
	got := make(chan Result, 1)
	go func() {
		r, _ := env.await(late, nil)
		got <- r
	}()
	select {
	case r := <-got:
		if !errors.Is(r.Err, ErrShuttingDown) {
			t.Fatalf("a Submit after the stop was answered %+v; want ErrShuttingDown", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Submit after the ingest actor stopped was never answered")
	}

	answered := make(chan Result, 1)
	answered <- Result{MessageID: 7}
	if r, ok := env.await(answered, nil); !ok || r.Err != nil || r.MessageID != 7 {
		t.Fatalf("an answer given before the stop: %+v, %v; want message 7", r, ok)
	}
}

// A message whose value the database refuses fails neither the others of its
// batch nor, sent again, every batch it comes in: the others are stored, and
// it is kept as rejected (its bytes only) and answered refused (AR). Before,
// every sender of the batch got AE, and the refused one's sender resent it
// forever. The refusal here is SQLite's own CHECK on the status column.
func TestARefusedMessageFailsNoOtherOfItsBatch(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	var logs bytes.Buffer
	in := &Ingest{env: &Env{Ctx: ctx, Store: st, Log: zerolog.New(&logs)}}
	good := func(key string) storage.NewMessage { return laneMsg(key, "lab/"+key) }
	bad := good("DOE^JANE")
	bad.Status = "bogus"
	bad.ControlID = "C2" // logged, as every message's (DESIGN §11); its bytes never

	results, touched, err := in.store([]storage.NewMessage{good("P1"), bad, good("P2")})
	if err != nil {
		t.Fatalf("store: %v; want no batch error", err)
	}
	for _, i := range []int{0, 2} {
		if results[i].Err != nil || results[i].MessageID == 0 {
			t.Fatalf("message %d of the batch: %+v; want stored", i, results[i])
		}
	}
	if !errors.Is(results[1].Err, storage.ErrRefused) || results[1].MessageID == 0 {
		t.Fatalf("the refused message: %+v; want ErrRefused and the id of its bytes kept", results[1])
	}
	if strings.Join(touched.Lanes, ",") != "lab/P1,lab/P2" {
		t.Fatalf("lanes told of: %v; want lab/P1,lab/P2", touched.Lanes)
	}
	d, err := st.MessageRead(ctx, results[1].MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Message.Status != storage.MessageRejected || string(d.Message.Payload) != "MSH|DOE^JANE" || len(d.Queue) != 0 ||
		!strings.Contains(d.Message.Error, "refused") {
		t.Fatalf("kept as %+v with %d queue rows; want rejected, its bytes, no delivery", d.Message, len(d.Queue))
	}
	if strings.Contains(logs.String(), "DOE") {
		t.Fatalf("a log line carries the message's contents: %s", logs.String())
	}
}

// A message that an operator's trigger turns away (PL/pgSQL RAISE, SQLSTATE
// P0001; SQLite's RAISE(ABORT)) is refused alone, like one a CHECK refuses:
// the others of its batch are stored and it is answered AR. It failed the
// whole batch with AE, every sender of it resending for as long as the
// trigger stood. The trigger is the database's own, in the test's schema.
func TestAMessageAnOperatorsTriggerRefusesFailsNoOtherOfItsBatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		open    func(t *testing.T) (storage.Store, func(q string) error)
		trigger []string
	}{
		{"postgres mf_messages", openPostgresSQL, []string{
			`CREATE FUNCTION mf_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			   IF NEW.control_id = 'M2' THEN RAISE EXCEPTION 'the audit trigger refuses %', NEW.payload; END IF;
			   RETURN NEW;
			 END $$`,
			`CREATE TRIGGER mf_test_refuse BEFORE INSERT ON mf_messages FOR EACH ROW EXECUTE FUNCTION mf_test_refuse()`,
		}},
		{"postgres mf_queue", openPostgresSQL, []string{
			`CREATE FUNCTION mf_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			   IF NEW.lane = 'lab/P2' THEN RAISE EXCEPTION 'the audit trigger refuses lane %', NEW.lane; END IF;
			   RETURN NEW;
			 END $$`,
			`CREATE TRIGGER mf_test_refuse BEFORE INSERT ON mf_queue FOR EACH ROW EXECUTE FUNCTION mf_test_refuse()`,
		}},
		{"sqlite mf_messages", openSQLiteSQL, []string{
			`CREATE TRIGGER mf_test_refuse BEFORE INSERT ON mf_messages WHEN NEW.control_id = 'M2'
			 BEGIN SELECT RAISE(ABORT, 'the audit trigger refuses this message'); END`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, exec := tc.open(t)
			for _, q := range tc.trigger {
				if err := exec(q); err != nil {
					t.Fatal(err)
				}
			}
			in := &Ingest{env: &Env{Ctx: ctx, Store: st, Log: zerolog.Nop()}}
			msgs := []storage.NewMessage{laneMsg("M0", "lab/P0"), laneMsg("M1", "lab/P1"), laneMsg("M2", "lab/P2"), laneMsg("M3", "lab/P3")}
			results, touched, err := in.store(msgs)
			if err != nil {
				t.Fatalf("store: %v; want no batch error", err)
			}
			for i, r := range results {
				if i == 2 {
					continue
				}
				if r.Err != nil || r.MessageID == 0 {
					t.Fatalf("message %d of the batch: %+v; want stored", i, r)
				}
			}
			if !errors.Is(results[2].Err, storage.ErrRefused) || results[2].MessageID == 0 || strings.Contains(results[2].Err.Error(), "audit trigger") {
				t.Fatalf("the message the trigger refuses: %+v; want ErrRefused, in the database's terms only, and the id of its bytes kept", results[2])
			}
			if strings.Join(touched.Lanes, ",") != "lab/P0,lab/P1,lab/P3" {
				t.Fatalf("lanes told of: %v; want lab/P0,lab/P1,lab/P3", touched.Lanes)
			}
		})
	}
}

// openPostgresSQL opens a migrated store in the test's own schema, and a
// function that runs SQL there outside the engine.
func openPostgresSQL(t *testing.T) (storage.Store, func(q string) error) {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Options{URL: pgtest.NewSchema(t), PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st, func(q string) error {
		_, err := st.Pool().Exec(ctx, q)
		return err
	}
}

// openSQLiteSQL opens a migrated SQLite store, and a function that runs SQL
// on its file outside the engine.
func openSQLiteSQL(t *testing.T) (storage.Store, func(q string) error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mf.db")
	st := openSQLiteAt(t, path)
	return st, func(q string) error {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.Exec(q)
		return err
	}
}

// scriptedStore refuses every batch holding a message whose control id is
// refuse, and fails its calls numbered in fail (1-based) with that error.
type scriptedStore struct {
	storage.Store
	refuse string
	fail   map[int]error
	calls  int
}

func (s *scriptedStore) MessageIngest(ctx context.Context, p storage.MessageIngestParams) ([]storage.IngestedMessage, error) {
	s.calls++
	if err := s.fail[s.calls]; err != nil {
		return nil, err
	}
	for _, m := range p.Messages {
		if m.ControlID == s.refuse && m.Status != storage.MessageRejected {
			return nil, storage.Refused("scripted")
		}
	}
	return s.Store.MessageIngest(ctx, p)
}

func openSQLite(t *testing.T) storage.Store {
	t.Helper()
	return openSQLiteAt(t, filepath.Join(t.TempDir(), "mf.db"))
}

func openSQLiteAt(t *testing.T, path string) storage.Store {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

func laneMsg(ctl, lane string) storage.NewMessage {
	return storage.NewMessage{Inbound: "in", ControlID: ctl, MessageType: "ADT^A01", Payload: []byte("MSH|" + ctl),
		Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "lab", Lane: lane}}}
}

// One refused message in a batch of 16 costs a few more commits, not one per
// message: the batch is halved until the refused one stands alone.
func TestARefusedMessageIsFoundByHalvingTheBatch(t *testing.T) {
	st := &scriptedStore{Store: openSQLite(t), refuse: "M11"}
	in := &Ingest{env: &Env{Ctx: context.Background(), Store: st, Log: zerolog.Nop()}}
	var msgs []storage.NewMessage
	for i := range 16 {
		msgs = append(msgs, laneMsg(fmt.Sprintf("M%d", i), fmt.Sprintf("lab/P%d", i)))
	}
	results, touched, err := in.store(msgs)
	if err != nil || len(touched.Lanes) != 15 {
		t.Fatalf("store: %v, %d lanes told of; want no error and 15", err, len(touched.Lanes))
	}
	for i, r := range results {
		if (i == 11) != errors.Is(r.Err, storage.ErrRefused) || r.MessageID == 0 {
			t.Fatalf("message %d: %+v", i, r)
		}
	}
	// 1 (all) + 2·4 (a half stored, a half split, down to one) + 1 (kept).
	if st.calls != 10 {
		t.Fatalf("%d store calls; want 10", st.calls)
	}
}

// A failure that is not a refusal, midway through the halves, ends the batch:
// no message after it is stored (a later one of the same lane would be
// delivered before the one its sender sends again), every one not stored
// gets the failure, and a fence lost on the way reaches the actor.
func TestAFailureMidwayThroughARefusedBatchStoresNothingAfterIt(t *testing.T) {
	for name, failure := range map[string]error{"connection": errors.New("connection reset"), "fence": storage.ErrFenced} {
		t.Run(name, func(t *testing.T) {
			// Calls: 1 the batch (refused), 2 [M0 M1] (fails).
			st := &scriptedStore{Store: openSQLite(t), refuse: "M3", fail: map[int]error{2: failure}}
			in := &Ingest{env: &Env{Ctx: context.Background(), Store: st, Log: zerolog.Nop()}}
			msgs := []storage.NewMessage{laneMsg("M0", "lab/P1"), laneMsg("M1", "lab/P1"), laneMsg("M2", "lab/P1"), laneMsg("M3", "lab/P2")}
			results, touched, err := in.store(msgs)
			if !errors.Is(err, failure) || len(touched.Lanes) != 0 || st.calls != 2 {
				t.Fatalf("store: %v, lanes %v, %d calls; want %v, none, 2", err, touched.Lanes, st.calls, failure)
			}
			for i, r := range results {
				if !errors.Is(r.Err, failure) || r.MessageID != 0 {
					t.Fatalf("message %d: %+v; want %v and nothing stored", i, r, failure)
				}
			}
		})
	}
}

// When the refused message's bytes cannot be kept for a passing reason, its
// sender hears that (AE: send again), not AR with nothing kept.
func TestARefusedMessageWhoseBytesCannotBeKeptIsAnsweredAE(t *testing.T) {
	// Calls: 1 the message (refused), 2 keeping its bytes (fenced).
	st := &scriptedStore{Store: openSQLite(t), refuse: "M0", fail: map[int]error{2: storage.ErrFenced}}
	in := &Ingest{env: &Env{Ctx: context.Background(), Store: st, Log: zerolog.Nop()}}
	results, _, err := in.store([]storage.NewMessage{laneMsg("M0", "lab/P1")})
	if !errors.Is(err, storage.ErrFenced) || !errors.Is(results[0].Err, storage.ErrFenced) || errors.Is(results[0].Err, storage.ErrRefused) {
		t.Fatalf("store: %v, result %+v; want ErrFenced for both", err, results[0])
	}
}

// A batch that the fence refused, or that the end of the term cut off, is
// the normal end of a term: logged at WARN, saying so and what the senders
// get (AE, "no longer the primary", which the end of the term now says too,
// not "the message store is unavailable"), not at ERROR as a store failure
// an operator must act on. A real store failure stays ERROR.
func TestABatchCutOffByTheEndOfTheTermIsNoError(t *testing.T) {
	ended, end := context.WithCancel(context.Background())
	end()
	for _, c := range []struct {
		name                 string
		ctx                  context.Context
		fail                 error
		level, says, answers string
	}{
		{"fenced", context.Background(), storage.ErrFenced, "warn", "this node stopped leading", "this node is no longer the primary"},
		{"cancelled", ended, nil, "warn", "this node stopped leading", "this node is no longer the primary"},
		{"failed", context.Background(), errors.New("connection reset"), "error", "storing a batch of messages failed", "the message store is unavailable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &scriptedStore{Store: openSQLite(t), fail: map[int]error{1: c.fail}}
			var logs bytes.Buffer
			in := &Ingest{env: &Env{Ctx: c.ctx, Store: st, Log: zerolog.New(&logs)}}
			results, _, err := in.store([]storage.NewMessage{laneMsg("M0", "lab/P1")})
			if err == nil || results[0].Err == nil {
				t.Fatalf("store: %v, result %+v; want the batch failed", err, results[0])
			}
			if got := storeReason(results[0].Err); got != c.answers {
				t.Errorf("the sender's AE says %q; want %q", got, c.answers)
			}
			var line struct{ Level, Message string }
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
				t.Fatalf("log %q: %v; want one line", logs.String(), err)
			}
			if line.Level != c.level || !strings.Contains(line.Message, c.says) {
				t.Fatalf("logged at %s: %q; want %s, saying %q", line.Level, line.Message, c.level, c.says)
			}
		})
	}
}

// refusingAll refuses every batch holding a message whose control id is
// refuse, its bytes kept as rejected included.
type refusingAll struct {
	storage.Store
	refuse string
}

func (s *refusingAll) MessageIngest(ctx context.Context, p storage.MessageIngestParams) ([]storage.IngestedMessage, error) {
	for _, m := range p.Messages {
		if m.ControlID == s.refuse || (m.Status == storage.MessageRejected && bytes.Contains(m.Payload, []byte(s.refuse))) {
			return nil, storage.Refused("scripted")
		}
	}
	return s.Store.MessageIngest(ctx, p)
}

// A message the database refuses, and its bytes as a rejected message too,
// is lost: its sender gets AR, and nothing is kept. The ERROR line is all
// the operator has to tell the sender which message it was: it said
// neither the inbound nor the control id. Nor did the WARN of a refused
// message whose bytes were kept say its control id.
func TestARefusedMessageIsLoggedWithItsInboundAndControlID(t *testing.T) {
	for _, tc := range []struct {
		name, level string
		store       func(storage.Store) storage.Store
	}{
		{"bytes kept", "warn", func(s storage.Store) storage.Store { return &scriptedStore{Store: s, refuse: "M2"} }},
		{"bytes refused too", "error", func(s storage.Store) storage.Store { return &refusingAll{Store: s, refuse: "M2"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			in := &Ingest{env: &Env{Ctx: context.Background(), Store: tc.store(openSQLite(t)), Log: zerolog.New(&logs)}}
			results, _, _ := in.store([]storage.NewMessage{laneMsg("M1", "lab/P1"), laneMsg("M2", "lab/P2")})
			if !errors.Is(results[1].Err, storage.ErrRefused) {
				t.Fatalf("the refused message: %+v; want ErrRefused", results[1])
			}
			n := 0
			for _, line := range strings.Split(logs.String(), "\n") {
				var rec struct {
					Level, Inbound string
					ControlID      string `json:"control_id"`
				}
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == tc.level && strings.Contains(line, "refused a") && !strings.Contains(line, "in a batch") {
					if rec.Inbound != "in" || rec.ControlID != "M2" {
						t.Fatalf("the %s line about the refused message does not name its inbound and control id:\n%s", tc.level, line)
					}
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d %s lines about the refused message, want one:\n%s", n, tc.level, logs.String())
			}
		})
	}
}

// A queue row an operator's trigger skips (PostgreSQL: BEFORE INSERT
// returning NULL) refuses its message (AR, its bytes kept as rejected), and
// the others of its batch are stored: the store refuses such a batch
// whole (263e78e), where it committed the message without that delivery.
func TestAMessageATriggerSkipsAQueueRowOfIsRefused(t *testing.T) {
	ctx := context.Background()
	st, exec := openPostgresSQL(t)
	for _, q := range []string{
		`CREATE FUNCTION mf_test_skip() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
		   IF NEW.lane = 'lab/P2' THEN RETURN NULL; END IF;
		   RETURN NEW;
		 END $$`,
		`CREATE TRIGGER mf_test_skip BEFORE INSERT ON mf_queue FOR EACH ROW EXECUTE FUNCTION mf_test_skip()`,
	} {
		if err := exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	in := &Ingest{env: &Env{Ctx: ctx, Store: st, Log: zerolog.New(&logs)}}
	results, touched, err := in.store([]storage.NewMessage{laneMsg("M1", "lab/P1"), laneMsg("M2", "lab/P2")})
	if err != nil || results[0].Err != nil || !errors.Is(results[1].Err, storage.ErrRefused) || results[1].MessageID == 0 {
		t.Fatalf("store: %v, %+v; want M1 stored and M2 refused, kept as rejected", err, results)
	}
	if got := strings.Join(touched.Lanes, ","); got != "lab/P1" {
		t.Fatalf("lanes told of: %q; want lab/P1 only", got)
	}
}

// fewerRowsStore stores as its Store does, then returns one queue id fewer
// for every message that has any: a store that committed a message without
// one of its queue rows, which no dialect does now.
type fewerRowsStore struct{ storage.Store }

func (s fewerRowsStore) MessageIngest(ctx context.Context, p storage.MessageIngestParams) ([]storage.IngestedMessage, error) {
	out, err := s.Store.MessageIngest(ctx, p)
	for i := range out {
		if n := len(out[i].QueueIDs); n > 0 {
			out[i].QueueIDs = out[i].QueueIDs[:n-1]
		}
	}
	return out, err
}

// A message stored with fewer queue rows than deliveries is said at ERROR,
// with no lane told of a row it may not have. Before, the ingest indexed
// past the queue ids it got and the panic, off the actor's goroutine, ended
// the process.
func TestAMessageStoredWithoutSomeOfItsQueueRowsIsSaid(t *testing.T) {
	ctx := context.Background()
	st, _ := openPostgresSQL(t)
	var logs bytes.Buffer
	in := &Ingest{env: &Env{Ctx: ctx, Store: fewerRowsStore{st}, Log: zerolog.New(&logs)}}
	m1 := laneMsg("M1", "lab/P1")
	m1.Deliveries = append(m1.Deliveries, storage.Delivery{Destination: "ris", Lane: "ris/P1"})
	results, touched, err := in.store([]storage.NewMessage{m1, laneMsg("M2", "lab/P2")})
	if err != nil || results[0].Err != nil || results[1].Err != nil {
		t.Fatalf("store: %v, %+v", err, results)
	}
	if len(touched.Lanes) != 0 {
		t.Fatalf("lanes told of: %q; want none", touched.Lanes)
	}
	if !strings.Contains(logs.String(), `"control_id":"M2","deliveries":1,"queue_rows":0`) || !strings.Contains(logs.String(), `"control_id":"M1","deliveries":2,"queue_rows":1`) {
		t.Fatalf("no ERROR naming M1's and M2's missing queue rows; logs:\n%s", logs.String())
	}
}

// gatedStore holds its first MessageIngest until gate closes, telling entered
// when it has begun; fail, if set, is that call's outcome.
type gatedStore struct {
	storage.Store
	entered chan struct{}
	gate    chan struct{}
	fail    error
	calls   int
}

func (s *gatedStore) MessageIngest(ctx context.Context, p storage.MessageIngestParams) ([]storage.IngestedMessage, error) {
	s.calls++
	if s.calls == 1 {
		close(s.entered)
		<-s.gate
		if s.fail != nil {
			return nil, s.fail
		}
	}
	return s.Store.MessageIngest(ctx, p)
}

func unrouted(ctl string) storage.NewMessage {
	return storage.NewMessage{Inbound: "in", ControlID: ctl, Payload: []byte("MSH|^~\\&|" + ctl), Status: storage.MessageUnrouted}
}

// A message is answered only once its transaction has committed, and one
// that was still waiting for a transaction when the graph stopped is
// answered that it was not stored (AE: its sender sends it again, to the
// next leader), never as stored.
func TestAMessageIsAnsweredOnlyAfterItsCommitAndAQueuedOneNotStoredOnAStop(t *testing.T) {
	st := &gatedStore{Store: openSQLite(t), entered: make(chan struct{}), gate: make(chan struct{})}
	sys := actor.NewActorSystem()
	env := &Env{Ctx: context.Background(), Store: st, Log: zerolog.Nop(), System: sys}
	pid := sys.Root.Spawn(NewIngest(env))

	first, queued := make(chan Result, 1), make(chan Result, 1)
	sys.Root.Send(pid, Submit{Msg: unrouted("M1"), Reply: first})
	<-st.entered // M1's transaction has begun and cannot commit yet
	sys.Root.Send(pid, Submit{Msg: unrouted("M2"), Reply: queued})
	stopped := sys.Root.PoisonFuture(pid) // a user message: after M2, which a stop would overtake

	r2, _ := env.await(queued, nil)
	if !errors.Is(r2.Err, ErrShuttingDown) {
		t.Fatalf("a message queued behind a transaction when the graph stopped was answered %+v; want ErrShuttingDown (not stored)", r2)
	}
	select {
	case r := <-first:
		t.Fatalf("a message was answered %+v while its transaction had not committed", r)
	default:
	}
	close(st.gate)
	if r1, _ := env.await(first, nil); r1.Err != nil || r1.MessageID == 0 {
		t.Fatalf("the message whose transaction committed was answered %+v; want its id", r1)
	}
	if err := stopped.Wait(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := st.Store.(interface{ DB() *sql.DB }).DB().QueryRow("SELECT count(*) FROM mf_messages").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d messages stored (%v), want 1", n, err)
	}
}

// An ingest the fence refused tells the node at once (OnFenced), so that it
// stops acting as leader now rather than at its next renewal, its senders
// answered AE all the while.
func TestAFencedIngestIsReported(t *testing.T) {
	st := &gatedStore{Store: openSQLite(t), entered: make(chan struct{}), gate: make(chan struct{}), fail: storage.ErrFenced}
	close(st.gate)
	fenced := make(chan string, 1)
	sys := actor.NewActorSystem()
	env := &Env{Ctx: context.Background(), Store: st, Log: zerolog.Nop(), System: sys,
		OnFenced: func(op string, err error) {
			if errors.Is(err, storage.ErrFenced) {
				fenced <- op
			}
		}}
	pid := sys.Root.Spawn(NewIngest(env))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })

	reply := make(chan Result, 1)
	sys.Root.Send(pid, Submit{Msg: unrouted("M1"), Reply: reply})
	if r, _ := env.await(reply, nil); !errors.Is(r.Err, storage.ErrFenced) {
		t.Fatalf("answered %+v; want ErrFenced", r)
	}
	select {
	case op := <-fenced:
		if op != "message_ingest" {
			t.Fatalf("OnFenced(%q), want message_ingest", op)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an ingest refused by the fence was not reported to OnFenced")
	}
}

// A batch whose statement waits on a lock held by another session (an
// operator's LOCK TABLE, a long migration or VACUUM FULL run by hand) is
// answered AE within a bounded time, said at ERROR with what to look at,
// and the senders keep their messages: it held every sender of the batch,
// and all those queued behind it, for as long as the lock was held, with
// no log line.
func TestABatchBlockedOnALockIsAnsweredInBoundedTime(t *testing.T) {
	ctx := context.Background()
	st, _ := openPostgresSQL(t)
	pool := st.(*postgres.Store).Pool()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the lock's end
	if _, err := tx.Exec(ctx, "LOCK TABLE mf_queue IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	in := &Ingest{env: &Env{Ctx: ctx, Store: st, Log: zerolog.New(&logs)}}
	type outcome struct {
		results []Result
		err     error
	}
	done := make(chan outcome, 1)
	start := time.Now()
	go func() {
		results, _, err := in.store([]storage.NewMessage{laneMsg("M0", "lab/P1")})
		done <- outcome{results, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(IngestTimeout + 10*time.Second):
		_ = tx.Rollback(ctx)
		<-done
		t.Fatalf("a batch blocked on a lock held elsewhere was not answered within %s (only once the lock went)", IngestTimeout+10*time.Second)
	}
	if took := time.Since(start); o.err == nil || o.results[0].Err == nil || took > IngestTimeout+5*time.Second {
		t.Fatalf("a batch blocked on a lock: error %v, result %+v after %s; want it failed (AE) within about %s", o.err, o.results[0], took, IngestTimeout)
	}
	if got := storeReason(o.results[0].Err); got != "the message store is unavailable" {
		t.Errorf("the sender's AE says %q; want %q", got, "the message store is unavailable")
	}
	if !strings.Contains(logs.String(), `"level":"error"`) || !strings.Contains(logs.String(), "did not answer in time") ||
		!strings.Contains(logs.String(), "pg_locks") {
		t.Errorf("logged %q; want an ERROR saying the store did not answer in time, and where to look (pg_locks)", logs.String())
	}
	_ = tx.Rollback(ctx)
	if _, _, err := in.store([]storage.NewMessage{laneMsg("M0", "lab/P1")}); err != nil {
		t.Fatalf("the batch sent again once the lock is gone: %v", err)
	}
}

// A batch is given IngestTimeout, and a second more for each 4 MiB it
// carries: max_message_bytes goes to 512 MiB and a file inbound stores a
// file of up to 512 MiB in one batch, which a fixed 10 s cut off, and
// answered AE, at every try, for ever.
func TestALargeBatchIsGivenTimeForItsBytes(t *testing.T) {
	for _, tc := range []struct {
		sizes []int
		want  time.Duration
	}{
		{[]int{300, 300}, IngestTimeout},
		{[]int{4 << 20}, IngestTimeout + time.Second},
		{[]int{512 << 20}, IngestTimeout + 128*time.Second},
		{[]int{256 << 20, 256 << 20}, IngestTimeout + 128*time.Second},
	} {
		var msgs []storage.NewMessage
		for _, n := range tc.sizes {
			msgs = append(msgs, storage.NewMessage{Payload: make([]byte, n)})
		}
		if got := ingestTimeout(msgs); got != tc.want {
			t.Errorf("a batch of %v bytes is given %s; want %s", tc.sizes, got, tc.want)
		}
	}
}

package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A resend-dead and a purge that want the same dead rows take their row
// locks in one order, so that neither waits for the other while holding a
// row the other waits for. The resend-dead locks its rows in id order
// (queue_resend_dead_pick.sql); the purge's delete locked them in the
// order its plan scans them, which is id order for an index scan of the
// primary key but heap order (the order the rows were last written: set
// aside) for the sequential or bitmap scan the planner takes on a small
// table. Here the purge's sessions may not use an index scan, so that the
// order does not hang on the planner's estimates; dead rows a < c < b were
// set aside b, a, c, and c is too new to purge. A third session holds c, so
// the resend-dead locks a and waits; the purge deletes b and waits for a;
// once c is let go, the resend-dead wants b. PostgreSQL found a deadlock
// and aborted one of them (the API answered 503). Now both finish.
func TestAResendDeadAndAPurgeOfTheSameDeadRowsDoNotDeadlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewSchema(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	open := func(params string) *Store {
		s, err := Open(ctx, Options{URL: url + params, PoolSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	resender := open("&application_name=resend_" + tag)
	purger := open("&application_name=purge_" + tag + "&enable_indexscan=off&enable_indexonlyscan=off&enable_bitmapscan=off")
	if err := resender.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	var ids [3]int64 // a, c, b
	for i, lane := range []string{"lab/A", "lab/C", "lab/B"} {
		if err := resender.pool.QueryRow(ctx, `WITH m AS (INSERT INTO mf_messages (inbound, payload, status) VALUES ('in', '\x4d5348'::bytea, 'routed') RETURNING id)
			INSERT INTO mf_queue (message_id, destination, lane) SELECT id, 'lab', $1 FROM m RETURNING id`, lane).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	a, c, bID := ids[0], ids[1], ids[2]
	for _, d := range []struct {
		id  int64
		age string
	}{{bID, "30 days"}, {a, "30 days"}, {c, "0 days"}} {
		if _, err := resender.pool.Exec(ctx, `UPDATE mf_queue SET status = 'dead', last_error = 'AR', updated_at = now() - $2::interval WHERE id = $1`, d.id, d.age); err != nil {
			t.Fatal(err)
		}
	}
	var heap []int64
	rows, _ := resender.pool.Query(ctx, `SELECT id FROM mf_queue ORDER BY ctid`)
	heap, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(heap) != 3 || heap[0] != bID || heap[1] != a {
		t.Fatalf("dead rows in heap order %v (%v); want b (%d) before a (%d)", heap, err, bID, a)
	}

	waiting := func(app string) bool {
		var n int
		if err := resender.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	hold, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT 1 FROM mf_queue WHERE id = $1 FOR UPDATE`, c); err != nil {
		t.Fatal(err)
	}
	resent := make(chan error, 1)
	go func() {
		_, err := resender.QueueResendDead(ctx, storage.QueueResendDeadParams{Destination: "lab",
			Lane: func(d storage.DeadRow) (string, storage.ResendSkip) { return d.Lane, storage.ResendQueued }})
		resent <- err
	}()
	waitFor("the resend-dead to wait for row c", func() bool { return waiting("resend_" + tag) })
	purged := make(chan error, 1)
	go func() {
		_, err := purger.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: 7 * 24 * time.Hour})
		purged <- err
	}()
	waitFor("the purge to wait for a row", func() bool { return waiting("purge_" + tag) })
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	errR, errP := <-resent, <-purged
	if errR != nil || errP != nil {
		t.Fatalf("resend-dead: %v; purge: %v; want both to finish", errR, errP)
	}
	var left, newRows int
	if err := resender.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'dead'), count(*) FILTER (WHERE status = 'pending') FROM mf_queue`).Scan(&left, &newRows); err != nil {
		t.Fatal(err)
	}
	if newRows != 3 || left > 1 {
		t.Fatalf("after the two: %d dead rows left, %d new rows; want c's dead row at most, and a new row of each message", left, newRows)
	}
}

// A resend-dead and an operator's resend of one of its dead rows' messages
// do not deadlock. The resend took the message's finished rows FOR KEY
// SHARE, which a resend-dead's FOR NO KEY UPDATE does not wait for, then the
// ingest lock, and then updated the dead row (its mark, resent_as), which
// waits for the resend-dead's lock: a resend-dead that had locked the row
// meanwhile and waited for the ingest lock behind the resend made
// PostgreSQL abort one of them. A third session holds the ingest lock until
// both wait for it, the resend first.
func TestAResendDeadAndAResendOfItsMessageDoNotDeadlock(t *testing.T) {
	r := resendMeetsResendDead(t, "dead", nil)
	if r.errOne != nil || r.errAll != nil {
		t.Fatalf("resend: %v; resend-dead: %v; want both to finish", r.errOne, r.errAll)
	}
	var rows int
	if err := r.s.pool.QueryRow(r.ctx, `SELECT count(*) FROM mf_queue WHERE message_id = $1`, r.msg).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("message %d has %d queue rows (%v); want its dead row and one new row: the dead row is resent once", r.msg, rows, err)
	}
}

// The case message_resend_lock.sql cannot order: the message's row is
// still pending when the resend locks the finished ones, and dies (its lane
// sets it aside) before the resend marks it. A resend-dead then locks it
// and waits for the ingest lock the resend holds, while the resend's mark
// waits for the row: PostgreSQL ends one as a deadlock's victim, and that
// operator call failed (40P01). It runs its transaction again: both finish.
func TestAResendAndAResendDeadMeetingOnARowThatDiedBetweenThemBothFinish(t *testing.T) {
	r := resendMeetsResendDead(t, "pending", func(ctx context.Context, s *Store, row int64) {
		if _, err := s.pool.Exec(ctx, `UPDATE mf_queue SET status = 'dead', last_error = 'AR' WHERE id = $1`, row); err != nil {
			t.Fatal(err)
		}
	})
	if r.errOne != nil || r.errAll != nil {
		t.Fatalf("resend: %v; resend-dead: %v; want both to finish", r.errOne, r.errAll)
	}
	var unmarked int
	if err := r.s.pool.QueryRow(r.ctx, `SELECT count(*) FROM mf_queue WHERE id = $1 AND resent_as IS NULL`, r.row).Scan(&unmarked); err != nil || unmarked != 0 {
		t.Fatalf("the dead row is not marked resent (%d, %v)", unmarked, err)
	}
}

// resendRace is what resendMeetsResendDead leaves: the store, the message
// and its queue row, and each call's error.
type resendRace struct {
	ctx            context.Context
	s              *Store
	msg, row       int64
	errOne, errAll error
}

// resendMeetsResendDead stores a message with one queue row of lab in
// status, then has an operator's resend of the message and a resend-dead of
// lab each wait for the ingest lock, which a third session holds until both
// wait for it, the resend first; between runs (unless nil) after the resend
// waits, before the resend-dead starts.
func resendMeetsResendDead(t *testing.T, status string, between func(ctx context.Context, s *Store, row int64)) resendRace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	url := pgtest.NewSchema(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	open := func(app string) *Store {
		s, err := Open(ctx, Options{URL: url + "&application_name=" + app + "_" + tag, PoolSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	deadResender, resender := open("resend_dead"), open("resend")
	if err := resender.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r := resendRace{ctx: ctx, s: resender}
	if err := resender.pool.QueryRow(ctx, `WITH m AS (INSERT INTO mf_messages (inbound, payload, status) VALUES ('in', '\x4d5348'::bytea, 'routed') RETURNING id)
		INSERT INTO mf_queue (message_id, destination, lane, status, last_error)
		SELECT id, 'lab', 'lab/A', $1, CASE WHEN $1 = 'dead' THEN 'AR' ELSE '' END FROM m RETURNING message_id, id`, status).Scan(&r.msg, &r.row); err != nil {
		t.Fatal(err)
	}
	waiting := func(app string) bool {
		var n int
		if err := resender.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app+"_"+tag).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close(context.Background()) })
	hold, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, queries.Get("message_ingest_lock")); err != nil {
		t.Fatal(err)
	}
	one := make(chan error, 1)
	go func() {
		_, err := resender.MessageResend(ctx, storage.MessageResendParams{MessageID: r.msg, Deliveries: []storage.Delivery{{Destination: "lab", Lane: "lab/A"}}})
		one <- err
	}()
	waitFor("the resend to wait for the ingest lock", func() bool { return waiting("resend") })
	if between != nil {
		between(ctx, resender, r.row)
	}
	all := make(chan error, 1)
	go func() {
		_, err := deadResender.QueueResendDead(ctx, storage.QueueResendDeadParams{Destination: "lab",
			Lane: func(d storage.DeadRow) (string, storage.ResendSkip) { return d.Lane, storage.ResendQueued }})
		all <- err
	}()
	waitFor("the resend-dead to wait", func() bool { return waiting("resend_dead") })
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r.errOne, r.errAll = <-one, <-all
	return r
}

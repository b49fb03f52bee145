package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/messagefoundry/mf/storage"
)

// A purge batch (the sweeper's 10,000 rows) must not hold SQLite's single
// writer for the whole batch: every ingest waits for the writer, so its ACK
// waited for the whole batch (0.3 to 0.7 s measured with bench/sqliteage),
// once per batch, hundreds of batches an hour on a busy node. Writes that
// come while a batch runs go in between its chunks.
func TestWritesGoInBetweenAPurgeBatchsChunks(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	const rows = 20 * storage.PurgeChunk
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < rows; i++ {
		if _, err := tx.ExecContext(ctx, "INSERT INTO mf_messages (id, inbound, received_at, payload, status) VALUES (?1, 'in', 0, x'00', 'routed')", i+1); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO mf_queue (message_id, destination, lane, status, created_at, updated_at) VALUES (?1, 'd', 'd/x', 'done', 0, 0)", i+1); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var ingested atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
				Inbound: "in", ControlID: "C", Payload: []byte("p"), Status: storage.MessageRouted,
				Deliveries: []storage.Delivery{{Destination: "live", Lane: "live/x"}},
			}}}); err != nil {
				t.Error(err)
				return
			}
			ingested.Add(1)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for ingested.Load() < 3 && time.Now().Before(deadline) { // the ingests are going
		time.Sleep(time.Millisecond)
	}
	before := ingested.Load()
	res, err := s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: time.Hour, Limit: rows})
	during := ingested.Load() - before
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if res.QueueRows != rows || res.Messages != rows {
		t.Fatalf("purged %d queue rows and %d messages, want %d of each", res.QueueRows, res.Messages, rows)
	}
	if during < 5 {
		t.Fatalf("%d ingests were committed while a purge of %d rows ran: it held the writer throughout, want at least 5 in between its chunks of %d", during, rows, storage.PurgeChunk)
	}
	t.Logf("%d ingests were committed while the purge ran", during)
}

// A purge chunk deletes the message of a queue row it deleted only once the
// message has no queue row left: a message's rows may be finished, and
// purged, in different chunks, or not all finished; and it does so after
// the walk for messages never queued has passed the message.
func TestAPurgedRowsMessageGoesWithItsLastRow(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := s.DB().ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	// Message 1: two finished rows. Message 2: one finished, one pending.
	exec("INSERT INTO mf_messages (id, inbound, received_at, payload, status) VALUES (1, 'in', 0, x'00', 'routed'), (2, 'in', 0, x'00', 'routed')")
	exec(`INSERT INTO mf_queue (id, message_id, destination, lane, status, created_at, updated_at) VALUES
	      (1, 1, 'a', 'a/x', 'done', 0, 0), (2, 1, 'b', 'b/x', 'dead', 0, 1),
	      (3, 2, 'a', 'a/y', 'done', 0, 2), (4, 2, 'b', 'b/y', 'pending', 0, 0)`)
	exists := func(id int) bool {
		var n int
		if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM mf_messages WHERE id = ?1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	r, err := s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: time.Hour, Limit: 1})
	if err != nil || r.QueueRows != 1 || r.Messages != 0 || !exists(1) {
		t.Fatalf("first purge: %+v, %v, message 1 kept %v; want 1 queue row, no message", r, err, exists(1))
	}
	r, err = s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: time.Hour})
	if err != nil || r.QueueRows != 2 || r.Messages != 1 {
		t.Fatalf("second purge: %+v, %v; want 2 queue rows and message 1", r, err)
	}
	if exists(1) || !exists(2) {
		t.Fatalf("after the purges message 1 exists %v (want false), message 2 %v (want true: its pending row is left)", exists(1), exists(2))
	}
	// The walk for messages never queued has passed message 2: it goes
	// with its last row once that is finished and purged.
	exec("UPDATE mf_queue SET status = 'done', updated_at = 3 WHERE id = 4")
	r, err = s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: time.Hour})
	if err != nil || r.QueueRows != 1 || r.Messages != 1 || exists(2) {
		t.Fatalf("third purge: %+v, %v, message 2 kept %v; want its last row and message 2", r, err, exists(2))
	}
}

// A purge with a backlog older than the cut-off that cannot be purged yet (a
// destination blocked for days: its messages have a pending row) deletes
// the finished messages and the never-queued ones, never a message that
// still has a queue row, and reads what its limit covers, not the backlog.
// message_purge_messages.sql walked every message past the cut-off, oldest
// first, looking each up in mf_queue, until it found its limit: the whole
// backlog at every call once the finished rows were gone, so at every
// hourly purge, in one write transaction that every ingest (and its ACK)
// waited for. The work is counted in pages read (SQLite's page cache hits
// and misses over the pool's connections), which no clock or load changes.
func TestAPurgeDoesNotWalkABlockedBacklog(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	const backlog, limit = 30000, 200
	const day = 24 * time.Hour
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := s.DB().ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// add writes n messages received from ago on, a second apart, the first
	// routed ones of them with queue rows: to lab, finished, and to ehr if
	// pending is set, pending; the others never queued (unrouted).
	add := func(ago time.Duration, n, routed int, pending bool) {
		t.Helper()
		exec(`WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?1)
		      INSERT INTO mf_messages (inbound, received_at, payload, status)
		      SELECT 'in', ?2 + n * 1000, x'4d5348', CASE WHEN n <= ?3 THEN 'routed' ELSE 'unrouted' END FROM g`,
			n, time.Now().Add(-ago).UnixMilli(), routed)
		exec(`INSERT INTO mf_queue (message_id, destination, lane, status, created_at, updated_at)
		      SELECT id, 'lab', 'lab/' || (id % 100), 'done', received_at, received_at FROM mf_messages m
		       WHERE status = 'routed' AND NOT EXISTS (SELECT 1 FROM mf_queue q WHERE q.message_id = m.id)`)
		if pending {
			exec(`INSERT INTO mf_queue (message_id, destination, lane, status, created_at, updated_at)
			      SELECT message_id, 'ehr', 'ehr/' || (message_id % 100), 'pending', created_at, created_at
			        FROM mf_queue WHERE destination = 'lab' AND status = 'done'`)
		}
	}
	add(30*day, backlog, backlog, true)
	add(20*day, 3300, 3000, false)

	// purge runs the sweeper's calls until one leaves nothing behind, and
	// returns the rows they deleted, the pages they read and the most
	// pages one call read.
	purge := func() (deleted, read, most int64) {
		t.Helper()
		for calls := 0; ; calls++ {
			if calls > 10*backlog/limit {
				t.Fatalf("the purge still deletes or says More after %d calls", calls)
			}
			before := pagesRead(t, s)
			r, err := s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: 7 * day, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			n := pagesRead(t, s) - before
			deleted += r.QueueRows + r.Messages
			read += n
			most = max(most, n)
			if r.QueueRows < limit && r.Messages < limit && !r.More {
				break
			}
		}
		t.Logf("the purge deleted %d rows and read %d pages, at most %d in one call", deleted, read, most)
		return deleted, read, most
	}
	check := func(when string) {
		t.Helper()
		var msgs, unqueued, orphans int64
		if err := s.DB().QueryRowContext(ctx, `
			SELECT (SELECT count(*) FROM mf_messages),
			       (SELECT count(*) FROM mf_messages m WHERE NOT EXISTS (SELECT 1 FROM mf_queue q WHERE q.message_id = m.id)),
			       (SELECT count(*) FROM mf_queue q WHERE NOT EXISTS (SELECT 1 FROM mf_messages m WHERE m.id = q.message_id))`).
			Scan(&msgs, &unqueued, &orphans); err != nil {
			t.Fatal(err)
		}
		if msgs != backlog || unqueued != 0 || orphans != 0 {
			t.Fatalf("%s: %d messages left (%d with no queue row), %d queue rows of a message deleted; want the %d of the backlog, each with its row",
				when, msgs, unqueued, orphans, backlog)
		}
	}
	// A call reads what its limit covers: its queue rows, their messages
	// and the messages it walks past, each a few pages of each table and
	// index it touches (about 10 a row, measured).
	const perRow = 20
	_, _, most := purge()
	check("after the first purge")
	if most > perRow*limit {
		t.Errorf("a purge call of at most %d rows of each table read %d pages (a blocked backlog of %d messages): want at most %d",
			limit, most, backlog, perRow*limit)
	}
	// The next hourly purge: an hour's traffic past the cut-off, and the
	// backlog walked again?
	add(19*day, 1100, 1000, false)
	deleted, read, _ := purge()
	check("after the second purge")
	if read > perRow*deleted {
		t.Errorf("the second purge read %d pages to delete %d rows (a blocked backlog of %d messages): want at most %d",
			read, deleted, backlog, perRow*deleted)
	}
	// And one with nothing past the cut-off to delete.
	if deleted, read, _ := purge(); deleted != 0 || read > backlog/100 {
		t.Errorf("a purge with nothing to delete deleted %d rows and read %d pages (a blocked backlog of %d messages): want none, and at most %d pages",
			deleted, read, backlog, backlog/100)
	}
}

// pagesRead returns the pages the store's connections have read so far: the
// page cache hits and misses of each connection of its pool, summed.
func pagesRead(t *testing.T, s *Store) int64 {
	t.Helper()
	ctx := context.Background()
	conns := make([]*sql.Conn, DefaultPoolSize) // all of them, each once
	for i := range conns {
		c, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	var pages int64
	for _, c := range conns {
		err := c.Raw(func(dc any) error {
			st, ok := dc.(msqlite.DBStatus)
			if !ok {
				return fmt.Errorf("the driver's connection %T has no DBStatus", dc)
			}
			for _, op := range []msqlite.DBStatusOp{msqlite.DBStatusCacheHit, msqlite.DBStatusCacheMiss} {
				n, _, err := st.Status(op, false)
				if err != nil {
					return err
				}
				pages += int64(n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return pages
}

package sqlite

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

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
	const rows = 20 * purgeChunk
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
		t.Fatalf("%d ingests were committed while a purge of %d rows ran: it held the writer throughout, want at least 5 in between its chunks of %d", during, rows, purgeChunk)
	}
	t.Logf("%d ingests were committed while the purge ran", during)
}

// A purge chunk deletes the message of a queue row it deleted only once the
// message has no queue row left: a message's rows may be finished, and
// purged, in different chunks, or not all finished.
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
}

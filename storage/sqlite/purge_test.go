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

package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// A backup taken while another handle writes is the store as of one
// commit: it holds every ingest committed before the backup began, each
// message with its queue row, and is sound. Backups follow one another
// with writes in between, so some are taken while the background
// checkpoint copies pages into the file (a copy of the file alone then
// lost commits, or had indexes that disagreed with their tables).
func TestBackupBesideWritesHoldsEveryEarlierCommit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mf.db")
	writer, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	if err := writer.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	reader, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()

	var committed atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			var msgs []storage.NewMessage
			for j := range 20 {
				msgs = append(msgs, storage.NewMessage{Inbound: "in", ControlID: fmt.Sprint(i, "-", j), MessageType: "ADT^A01",
					Payload: []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|1|P|2.5\r"), Status: storage.MessageRouted,
					Deliveries: []storage.Delivery{{Destination: "out", Lane: fmt.Sprint("out/", j%4)}}})
			}
			if _, err := writer.MessageIngest(ctx, storage.MessageIngestParams{Messages: msgs}); err != nil {
				done <- err
				return
			}
			committed.Add(int64(len(msgs)))
		}
	}()
	dir := t.TempDir()
	for i := range 10 {
		before := committed.Load()
		sum, err := reader.Backup(ctx, filepath.Join(dir, fmt.Sprint(i, ".db")))
		if err != nil {
			close(stop)
			t.Fatalf("backup %d beside writes: %v", i, err)
		}
		if sum.Messages < before || sum.Unfinished != sum.Messages || sum.LastQueueID != sum.Messages {
			t.Errorf("backup %d holds %d messages, %d queue rows to deliver, last queue id %d; want at least the %d committed before it, one row each",
				i, sum.Messages, sum.Unfinished, sum.LastQueueID, before)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

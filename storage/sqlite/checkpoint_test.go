package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// Under writes that never pause, the background checkpoints still catch the
// WAL up, so that it restarts from its beginning instead of growing. The
// WAL header's checkpoint sequence number (bytes 12-15) counts the restarts.
// The writes go on until it has restarted twice; without step 2
// (or without the checkpoints) the WAL never restarts while they go on, and
// they stop at limit with the -wal file as large as everything written.
func TestTheWALRestartsUnderContinuousWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mf.db")
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	before := walRestarts(t, path)
	payload := bytes.Repeat([]byte("x"), 16<<10)
	const writers, limit = 4, 12 * walRestartFrames * 4096 // bytes of payload
	var written atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for walRestarts(t, path)-before < 2 && written.Load() < limit && !t.Failed() {
				_, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
					Inbound: "in", ControlID: "C", Payload: payload, Status: storage.MessageRouted,
					Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/x"}},
				}}})
				if err != nil {
					t.Error(err)
					return
				}
				written.Add(int64(len(payload)))
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	restarts := walRestarts(t, path) - before
	t.Logf("%d MB of payload written; %d WAL restarts; -wal file %.1f MB", written.Load()>>20, restarts, float64(fi.Size())/(1<<20))
	if restarts < 2 {
		t.Fatalf("%d WAL restarts after %d MB of writes: the checkpoints do not catch the WAL up while writes go on", restarts, written.Load()>>20)
	}
}

// walRestarts reads the checkpoint sequence number from the WAL header.
func walRestarts(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := make([]byte, 16)
	if _, err := io.ReadFull(f, h); err != nil {
		t.Fatalf("WAL header: %v", err)
	}
	return int64(binary.BigEndian.Uint32(h[12:]))
}

// storeBehindALongRead opens a migrated store with one message, and a
// connection in a transaction that has read it: its snapshot pins the WAL,
// as a long read does (mf backup's VACUUM INTO of a large store), until it
// ends (ROLLBACK). ingest stores one message with payload.
func storeBehindALongRead(t *testing.T) (s *Store, path string, ingest func(payload []byte), conn *sql.Conn) {
	t.Helper()
	ctx := context.Background()
	path = filepath.Join(t.TempDir(), "mf.db")
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ingest = func(payload []byte) {
		t.Helper()
		if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
			Inbound: "in", ControlID: "C", Payload: payload, Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/x"}},
		}}}); err != nil {
			t.Fatal(err)
		}
	}
	ingest([]byte("first"))
	conn, err = s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM mf_messages").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return s, path, ingest, conn
}

// A long read (mf backup's VACUUM INTO of a large store, say) keeps the
// checkpoints from passing it, so the WAL grows by everything written
// meanwhile. Once the read ends and the WAL restarts, the -wal file must
// shrink back to walSizeLimit: SQLite otherwise rewrites it in place from
// its beginning and keeps its largest size on disk for as long as the
// store is open.
func TestTheWALFileShrinksAfterALongRead(t *testing.T) {
	ctx := context.Background()
	_, path, ingest, conn := storeBehindALongRead(t)
	big := bytes.Repeat([]byte("x"), 256<<10)
	for written := int64(0); written < 2*walSizeLimit; written += int64(len(big)) {
		ingest(big)
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	grown := fi.Size()
	if grown <= walSizeLimit {
		t.Fatalf("the -wal file is %d bytes after %d bytes written beside a read: the read did not pin it", grown, 2*walSizeLimit)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// Writes go on, small ones, as a running engine's do: the checkpoints
	// catch up and the WAL restarts.
	before := walRestarts(t, path)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ingest([]byte("small"))
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		if walRestarts(t, path) > before && fi.Size() <= walSizeLimit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the -wal file is still %d bytes (%d at its largest) 30 s after the long read ended (%d WAL restarts since): it keeps its largest size, want at most %d",
				fi.Size(), grown, walRestarts(t, path)-before, int64(walSizeLimit))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// While a long read keeps the checkpoints from passing it, step 2 must not
// take the writer: it could copy nothing more then, and once the read
// ended it copied everything written during the read while every write
// waited (323 ms for 93,439 pages after mf backup of a 3.65 GiB store beside
// a load, measured with a timing print). Step 1, without the writer, copies
// that first.
func TestACheckpointBehindALongReadLeavesTheWriterAlone(t *testing.T) {
	ctx := context.Background()
	s, _, ingest, conn := storeBehindALongRead(t)
	defer conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // the test's end
	big := bytes.Repeat([]byte("x"), 256<<10)
	for written := 0; written < 2*walRestartFrames*4096; written += len(big) {
		ingest(big)
	}
	// The writer is busy (a long group commit, say) for as long as the
	// checkpoint runs.
	s.writer <- struct{}{}
	defer func() { <-s.writer }()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.checkpoint(cctx); err != nil {
		t.Fatalf("a checkpoint behind a read that pins the WAL: %v", err)
	}
}

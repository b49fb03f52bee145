package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// Once the store has read a damaged page (SQLite's "database disk image is
// malformed"), it accepts no more messages and Ping fails (so /ready says
// not ready), naming the damage and what to do: an engine started on a
// backup copied by hand over a crashed store's mf.db (its stale -wal
// applied to it) answered AA and said ready while every listing of its
// lanes failed, storing acknowledged messages in a file SQLite had found
// damaged.
func TestADamagedStoreAcceptsNothingMore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mf.db")
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	msg := func(id string) storage.MessageIngestParams {
		return storage.MessageIngestParams{Messages: []storage.NewMessage{{Inbound: "in", ControlID: id, MessageType: "ADT^A01",
			Payload: []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|" + id + "|P|2.5\r"), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "out", Lane: "out/P1"}}}}}
	}
	if _, err := s.MessageIngest(ctx, msg("1")); err != nil {
		t.Fatal(err)
	}
	var root, pageSize int64
	if err := s.DB().QueryRow("SELECT rootpage FROM sqlite_master WHERE name = 'mf_queue'").Scan(&root); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().QueryRow("PRAGMA page_size").Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	s.Close() // checkpoints: the page is in mf.db, and no -wal overrides it

	// An invalid b-tree page type at the queue table's root.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, (root-1)*pageSize); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s, err = sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping before any read met the damage: %v", err)
	}
	if _, err := s.QueueLanes(ctx, storage.QueueLanesParams{}); err == nil {
		t.Fatal("listing lanes of a queue whose root page is damaged: <nil>; want SQLite's malformed error")
	}
	unrouted := msg("2")
	unrouted.Messages[0].Status, unrouted.Messages[0].Deliveries = storage.MessageUnrouted, nil
	_, err = s.MessageIngest(ctx, unrouted)
	if err == nil {
		t.Fatal("a message stored into a store known damaged: <nil>; want it refused")
	}
	if !errors.Is(err, storage.ErrDamaged) || !strings.Contains(err.Error(), "mf restore") {
		t.Errorf("ingest into a damaged store: %v; want storage.ErrDamaged, saying to restore a backup (mf restore)", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, storage.ErrDamaged) {
		t.Errorf("ping of a store known damaged: %v; want storage.ErrDamaged", err)
	}
}

package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/storage"
)

// Migration 0003 rebuilds mf_messages and mf_queue with their status CHECKs
// written as comparisons. On a store made by the earlier migrations it keeps
// every row, the foreign key, the CHECKs' meaning and the AUTOINCREMENT
// counters (an id is never reused, also when the highest rows were purged);
// and no write of the hot path builds a temporary b-tree for a CHECK any more.
func TestTheStatusChecksMigrationKeepsRowsCountersAndConstraints(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	migrations, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	exec(queries.Get("migrate_table"))
	for _, m := range migrations {
		if m.Version < 3 {
			exec(m.SQL)
			exec(queries.Get("migrate_record"), m.Version, m.Name)
		}
	}
	// Three messages with a queue row each; the top one is then purged, so
	// both counters stand above the highest id left.
	msgs := make([]storage.NewMessage, 3)
	for i := range msgs {
		msgs[i] = storage.NewMessage{Inbound: "in", ControlID: "C", Payload: []byte("MSH|"), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/1"}}}
	}
	res, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	exec("DELETE FROM mf_queue WHERE id = ?", res[2].QueueIDs[0])
	exec("DELETE FROM mf_messages WHERE id = ?", res[2].MessageID)
	exec("UPDATE mf_queue SET status = 'done', held = 1 WHERE id = ?", res[0].QueueIDs[0])

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	d, err := s.MessageRead(ctx, res[0].MessageID)
	if err != nil || len(d.Queue) != 1 || d.Queue[0].Status != storage.QueueDone || !d.Queue[0].Held || string(d.Message.Payload) != "MSH|" {
		t.Fatalf("message %d after the migration: %+v, %v", res[0].MessageID, d, err)
	}
	if d, err := s.MessageRead(ctx, res[1].MessageID); err != nil || len(d.Queue) != 1 || d.Queue[0].Status != storage.QueuePending {
		t.Fatalf("message %d after the migration: %+v, %v", res[1].MessageID, d, err)
	}
	again, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: msgs[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].MessageID != res[2].MessageID+1 || again[0].QueueIDs[0] != res[2].QueueIDs[0]+1 {
		t.Fatalf("ids after the migration: message %d, queue row %d; want %d and %d (never reused)",
			again[0].MessageID, again[0].QueueIDs[0], res[2].MessageID+1, res[2].QueueIDs[0]+1)
	}
	for q, want := range map[string]string{
		"UPDATE mf_queue SET status = 'lost' WHERE id = 2":                              "CHECK constraint failed",
		"UPDATE mf_queue SET held = 2 WHERE id = 2":                                     "CHECK constraint failed",
		"UPDATE mf_messages SET status = 'pending' WHERE id = 2":                        "CHECK constraint failed",
		"INSERT INTO mf_queue (message_id, destination, lane) VALUES (999, 'd', 'd/1')": "FOREIGN KEY constraint failed",
	} {
		if _, err := s.db.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", q, err, want)
		}
	}
	for _, q := range []string{"message_ingest", "message_ingest_queue", "queue_complete", "queue_retry", "queue_hold"} {
		rows, err := s.db.QueryContext(ctx, "EXPLAIN "+queries.Get(q), placeholderArgs(q)...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for rows.Next() {
			var addr, p1, p2, p3, p5 int64
			var op string
			var p4, comment any
			if err := rows.Scan(&addr, &op, &p1, &p2, &p3, &p4, &p5, &comment); err != nil {
				t.Fatal(err)
			}
			if op == "OpenEphemeral" {
				t.Errorf("%s builds a temporary b-tree (step %d): a CHECK with an IN list?", q, addr)
			}
		}
		rows.Close()
	}
}

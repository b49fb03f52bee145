package sqlite

import (
	"context"
	"strings"
	"testing"
)

// SQLite uses a partial index only when the query repeats its WHERE term, so
// a harmless-looking edit to a query can silently turn a lane claim into a
// scan of every row ever queued. The hot and recurring queue statements must
// never scan mf_queue without an index.
func TestQueueStatementsUseIndexes(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	wantIndex := map[string]string{
		"queue_claim_next":      "mf_queue_lane_head",
		"queue_claim_run":       "mf_queue_lane_head",
		"queue_lanes":           "mf_queue_lane_head",
		"queue_stats":           "mf_queue_stats",
		"queue_reclaim_expired": "mf_queue_inflight",
		"queue_recover_foreign": "mf_queue_inflight",
		"queue_release_own":     "mf_queue_lane_head",
		"message_purge_queue":   "mf_queue_finished",
		"message_purge_freed":   "mf_queue_message",
		// The walk for messages never queued goes on in id order from
		// where it stopped, and looks each up in mf_queue.
		"message_purge_walk":   "INTEGER PRIMARY KEY",
		"message_purge_walked": "mf_queue_message",
		"queue_by_message":     "mf_queue_message",
		"queue_skip":           "mf_queue_lane_head",
		"queue_skip_refused":   "mf_queue_lane_head",
		// An operator's search walks its received_at window, whatever
		// else it filters by; a resend looks up the message's rows.
		"message_search":        "mf_messages_received_at",
		"message_resend_queued": "mf_queue_message",
		"queue_relane_read":     "mf_queue_lane_head",
		"queue_relane":          "INTEGER PRIMARY KEY",
	}
	for name, index := range wantIndex {
		rows, err := s.db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+queries.Get(name), placeholderArgs(name)...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		for _, line := range plan {
			if line == "SCAN mf_queue" || line == "SCAN mf_messages" {
				t.Errorf("%s scans a whole table:\n%s", name, text)
			}
		}
		if !strings.Contains(text, index) {
			t.Errorf("%s does not use %s:\n%s", name, index, text)
		}
	}
}

// placeholderArgs gives query name a 1 for each of its placeholders, enough
// to EXPLAIN it.
func placeholderArgs(name string) []any {
	args := make([]any, strings.Count(queries.Get(name), "?"))
	for i := range args {
		args[i] = 1
	}
	return args
}

// A metrics scrape (QueueStats, every 15 s or so) counts every unfinished
// row. Read through mf_queue_lane_head it looked each one up in the table
// for its destination, status, held and created_at: 0.73 to 0.85 s for
// 61,000 unfinished rows in a 3.7 GiB store (bench/sqliteage), about 12 s
// a scrape for an hour's backlog at 300 messages/s, each a read that keeps
// the WAL from restarting. It must read indexes only.
func TestQueueStatsReadsIndexesOnly(t *testing.T) {
	s := openMigrated(t)
	rows, err := s.db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+queries.Get("queue_stats"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	for _, line := range plan {
		if strings.Contains(line, "mf_queue") && !strings.Contains(line, "COVERING INDEX") {
			t.Fatalf("queue_stats reads mf_queue's rows, not an index alone (%q):\n%s", line, strings.Join(plan, "\n"))
		}
	}
}

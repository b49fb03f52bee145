package postgres

import (
	"context"
	"testing"
	"time"
)

// QueueStats, which every node's GET /metrics runs at every scrape, reads
// the unfinished and dead rows, not the done rows that retention keeps for
// days: written as one "status IN ('pending', 'inflight', 'dead')", which
// neither partial index (mf_queue_lane_head, mf_queue_dead) covers, it was
// a scan of the whole table (150 ms of three processes at two million rows,
// growing with the rows kept).
func TestQueueStatsReadsNoDoneRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := openMigrated(t, ctx, 1)
	const unfinished, dead = 300, 59
	for _, q := range []string{
		`INSERT INTO mf_messages (inbound, payload, status)
		 SELECT 'in', '\x4d5348'::bytea, 'routed' FROM generate_series(1, 60000)`,
		// The newest 300 unfinished (half of them in flight), one in a
		// thousand of the others dead, the rest done.
		`INSERT INTO mf_queue (message_id, destination, lane, status)
		 SELECT id, 'd' || (id % 3), 'd/' || (id % 100),
		        CASE WHEN id > 59700 AND id % 2 = 0 THEN 'inflight'
		             WHEN id > 59700 THEN 'pending'
		             WHEN id % 1000 = 0 THEN 'dead'
		             ELSE 'done' END
		   FROM mf_messages`,
		`ANALYZE mf_queue`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := s.QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var counted int64
	for _, st := range stats {
		counted += st.Count
	}
	if len(stats) != 9 || counted != unfinished+dead {
		t.Fatalf("stats %+v: want 9 groups (3 destinations, 3 statuses) counting %d rows", stats, unfinished+dead)
	}
	plan := explainAnalyze(t, ctx, s.pool, queries.Get("queue_stats"))
	if _, read := plan.tableRows(); read > 2*(unfinished+dead) {
		t.Errorf("queue_stats read %v rows of mf_queue (%d of them unfinished or dead):\n%s", read, unfinished+dead, plan.String())
	}
}

package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage/storagetest"
)

// QueueStats says how long the oldest unfinished row of each destination
// has waited, on the database's clock (mf_queue_oldest_age_seconds): the
// number an operator alerts on, which no metric gave (GET /lanes has each
// lane's head_age_seconds, one lane at a time). Dead rows have none.
func TestQueueStatsTellTheOldestRowsAge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openMigrated(t, ctx, 1)
	for _, q := range []string{
		`INSERT INTO mf_messages (inbound, payload, status) SELECT 'in', '\x4d5348'::bytea, 'routed' FROM generate_series(1, 6)`,
		`INSERT INTO mf_queue (message_id, destination, lane, status, created_at)
		 SELECT id, CASE WHEN id <= 3 THEN 'lab' ELSE 'ris' END, 'l/' || id,
		        CASE id WHEN 2 THEN 'inflight' WHEN 6 THEN 'dead' ELSE 'pending' END,
		        now() - make_interval(secs => CASE id WHEN 1 THEN 90 WHEN 2 THEN 300 WHEN 4 THEN 20 WHEN 6 THEN 5000 ELSE 0 END)
		   FROM mf_messages`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := s.QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	storagetest.CheckOldestAges(t, stats, map[string]time.Duration{"lab/pending": 90 * time.Second, "lab/inflight": 300 * time.Second, "ris/pending": 20 * time.Second, "ris/dead": 0})
}

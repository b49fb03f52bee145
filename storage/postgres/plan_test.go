package postgres

import (
	"context"
	"strings"
	"testing"
	"time"
)

// An operator's skip checks that no row of the lane is ahead of its row. That
// check must stay a seek on mf_queue_lane_head by (lane, id) in the generic
// plan a prepared statement keeps, even one made on an empty queue (a fresh
// install, before autovacuum's first ANALYZE): written as a NOT EXISTS, it
// was planned there as an anti join that read every entry of the index, with
// the lane only as a join filter.
func TestSkipHeadCheckSeeksTheLaneHeadIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openMigrated(t, ctx, 1)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(context.Background(), "RESET plan_cache_mode; DEALLOCATE ALL") }()
	for name, args := range map[string]string{"queue_skip": "(1, 'x')", "queue_skip_refused": "(1)"} {
		if _, err := conn.Exec(ctx, "PREPARE plan_"+name+" AS "+queries.Get(name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE plan_"+name+args)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "Scan using mf_queue_lane_head") || !strings.Contains(text, "Index Cond: ((lane = ") ||
			strings.Contains(text, "Seq Scan") || strings.Contains(text, "Bitmap") {
			t.Errorf("%s's generic plan on an empty queue does not seek mf_queue_lane_head by lane:\n%s", name, text)
		}
	}
}

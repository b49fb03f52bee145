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

// An operator's search (GET /messages) must walk the received_at index over
// its window and stop there, in the generic plan too (pgx prepares it): a
// walk down the primary key filtering on
// received_at, which a LIMIT can make look cheap, reads every newer message
// first; a sequential scan reads them all.
func TestSearchWalksTheReceivedAtIndex(t *testing.T) {
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
	// A month of messages, as statistics see it: the plans below are made
	// for a table whose received_at follows its id.
	if _, err := conn.Exec(ctx, `INSERT INTO mf_messages (inbound, received_at, control_id, payload, status)
SELECT 'adt_in', now() - interval '30 days' + i * interval '30 days' / 200000, 'C' || i, '\x00', 'routed'
  FROM generate_series(1, 200000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE mf_messages"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "PREPARE plan_search AS "+queries.Get("message_search")); err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{
		"(now() - interval '1 day', 'infinity', 'ABC123', '', '', 9223372036854775807, 51)",
		"(now() - interval '11 days', now() - interval '10 days', '', 'adt_in', 'routed', 12345, 1001)",
	} {
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE plan_search"+args)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "Index Scan Backward using mf_messages_received_at on mf_messages m") || !strings.Contains(text, "Cond: ((received_at >= $1) AND (received_at < $2)") ||
			strings.Contains(text, "Seq Scan") || strings.Contains(text, "mf_messages_pkey on mf_messages m") {
			t.Errorf("the search's generic plan does not read mf_messages through mf_messages_received_at over its window:\n%s", text)
		}
	}
}

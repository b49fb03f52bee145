package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// An operator's skip checks that no row of the lane is ahead of its row. That
// check must stay a seek on mf_queue_lane_head by (lane, id) in the generic
// plan a prepared statement keeps, even one made on an empty queue (a fresh
// install, before autovacuum's first ANALYZE): written as a NOT EXISTS, it
// was planned there as an anti join that read every entry of the index, with
// the lane only as a join filter.
func TestSkipHeadCheckSeeksTheLaneHeadIndex(t *testing.T) {
	ctx, conn := genericPlans(t)
	for name, args := range map[string]string{"queue_skip": "(1, 'x')", "queue_skip_refused": "(1)"} {
		if _, err := conn.Exec(ctx, "PREPARE plan_"+name+" AS "+queries.Get(name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		text := explained(t, ctx, conn, "EXPLAIN EXECUTE plan_"+name+args)
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
	ctx, conn := genericPlans(t)
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
		text := explained(t, ctx, conn, "EXPLAIN EXECUTE plan_search"+args)
		if !strings.Contains(text, "Index Scan Backward using mf_messages_received_at on mf_messages m") || !strings.Contains(text, "Cond: ((received_at >= $1) AND (received_at < $2)") ||
			strings.Contains(text, "Seq Scan") || strings.Contains(text, "mf_messages_pkey on mf_messages m") {
			t.Errorf("the search's generic plan does not read mf_messages through mf_messages_received_at over its window:\n%s", text)
		}
	}
}

// A page of the lane listing (queue_lanes) must walk mf_queue_lane_head in
// lane order and stop at its limit, in the generic plan a prepared
// statement keeps too: a hash aggregate or a sort reads every unfinished row
// for any page, and the lane manager's first page after a promotion (the
// first claims wait for it) would cost as much as the whole listing.
func TestLanePageWalksTheLaneHeadIndex(t *testing.T) {
	ctx, conn := genericPlans(t)
	// A backlog, as statistics see it: 20,000 unfinished rows in 2,000 lanes.
	for _, q := range []string{
		`INSERT INTO mf_messages (inbound, control_id, payload, status)
SELECT 'in', 'C' || i, '\x00', 'routed' FROM generate_series(1, 20000) i`,
		`INSERT INTO mf_queue (message_id, destination, lane) SELECT id, 'lab', 'lab/' || (id % 2000) FROM mf_messages`,
		`ANALYZE mf_queue`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, phase := range []string{"on a backlog", "on an empty queue"} {
		if phase == "on an empty queue" {
			if _, err := conn.Exec(ctx, "DEALLOCATE plan_lanes; DELETE FROM mf_queue; ANALYZE mf_queue"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.Exec(ctx, "PREPARE plan_lanes AS "+queries.Get("queue_lanes")); err != nil {
			t.Fatal(err)
		}
		text := explained(t, ctx, conn, "EXPLAIN EXECUTE plan_lanes('lab/5', 1000)")
		if !strings.Contains(text, "Scan using mf_queue_lane_head") || !strings.Contains(text, "GroupAggregate") ||
			strings.Contains(text, "Seq Scan") || strings.Contains(text, "HashAggregate") || strings.Contains(text, "Sort") {
			t.Errorf("queue_lanes's generic plan %s does not walk mf_queue_lane_head in lane order:\n%s", phase, text)
		}
	}
}

// genericPlans gives a connection to a fresh migrated store on which every
// prepared statement gets a generic plan, as one pgx keeps may; the test's
// own PREPAREs are forgotten when it ends.
func genericPlans(t *testing.T) (context.Context, *pgxpool.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s := openMigrated(t, ctx, 1)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "RESET plan_cache_mode; DEALLOCATE ALL") })
	return ctx, conn
}

// explained runs stmt, an EXPLAIN, and returns the plan's lines as one text.
func explained(t *testing.T, ctx context.Context, conn *pgxpool.Conn, stmt string) string {
	t.Helper()
	rows, err := conn.Query(ctx, stmt)
	if err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	return strings.Join(plan, "\n")
}

// An operator's resend-dead picks a destination's dead rows not resent
// yet, a chunk at a time in id order from where the last chunk ended
// (queue_resend_dead_pick.sql). Each chunk must walk an index of those rows
// in that order from its start and stop at its limit, in the generic plan
// too. Before mf_queue_dead_unsent (migration 0015) the generic plan walked
// mf_queue_pkey from the chunk's start through every row of every
// destination, done ones included (here 398,800 rows filtered, 116 ms, for
// the first chunk; 7 ms with the index), to the table's end for the last
// chunk; the other plan, through mf_queue_dead, read and sorted every dead
// row of the destination, those resent before included.
func TestResendDeadPickWalksTheUnsentDeadRowsInIdOrder(t *testing.T) {
	ctx, conn := genericPlans(t)
	// 400,000 rows of two destinations, 1% dead (as a few bad messages
	// leave them), those of the first half resent already.
	for _, q := range []string{
		`INSERT INTO mf_messages (inbound, control_id, payload, status)
SELECT 'in', 'C' || i, '\x00', 'routed' FROM generate_series(1, 400000) i`,
		`INSERT INTO mf_queue (message_id, destination, lane, status, resent_as)
SELECT id, CASE WHEN id % 2 = 0 THEN 'lab' ELSE 'emr' END, 'x/' || (id % 2000),
       CASE WHEN id % 200 < 2 THEN 'dead' ELSE 'done' END,
       CASE WHEN id % 200 < 2 AND id < 200000 THEN id ELSE NULL END FROM mf_messages`,
		`ANALYZE mf_queue`,
		`PREPARE plan_pick AS ` + queries.Get("queue_resend_dead_pick"),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, after := range []int{0, 300000} { // the first chunk, a later one
		text := explained(t, ctx, conn, fmt.Sprintf("EXPLAIN (ANALYZE, BUFFERS) EXECUTE plan_pick('lab', %d, 0, NULL, NULL, 1000)", after))
		if !strings.Contains(text, "Index Scan using mf_queue_dead_unsent on mf_queue q") || strings.Contains(text, "Sort") ||
			strings.Contains(text, "Rows Removed by Filter") || strings.Contains(text, "Seq Scan on mf_queue") || strings.Contains(text, "Bitmap") {
			t.Errorf("the resend-dead pick's generic plan, after id %d, does not walk mf_queue_dead_unsent in id order:\n%s", after, text)
		}
	}
}

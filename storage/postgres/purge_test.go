package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A purge call reads about as many rows as it deletes, not the tables, when
// a backlog of finished rows is older than the cut-off (retention lowered
// to free disk, or a purge that could not run for a while), in the custom
// plans of the first executions of a prepared statement and in the generic
// plan PostgreSQL may keep after them. The statements read their candidates
// in index order, but were written as joins the planner costed against the
// whole table: a hash join over every row of mf_queue for the queue rows,
// and a hash anti join over every row of both tables for the messages. So
// each call of a backlog's purge read all of both tables (1.2 s a call at a
// million rows, and as many calls as the backlog has batches).
func TestAPurgeCallReadsWhatItDeletesNotTheTables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := openMigrated(t, ctx, 1)
	const rows, limit = 60000, 500
	// Finished a month ago, oldest first, in id order.
	fill := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO mf_messages (inbound, payload, status, received_at)
		  SELECT 'in', '\x4d5348'::bytea, 'routed', now() - interval '30 days' + g * interval '1 second'
		    FROM generate_series(1, $1::int) g`, []any{rows}},
		{`INSERT INTO mf_queue (message_id, destination, lane, status, updated_at)
		  SELECT id, 'd', 'd/' || (id % 100), 'done', received_at FROM mf_messages`, nil},
		{`ANALYZE mf_messages`, nil},
		{`ANALYZE mf_queue`, nil},
	}
	for _, f := range fill {
		if _, err := s.pool.Exec(ctx, f.sql, f.args...); err != nil {
			t.Fatal(err)
		}
	}
	older := storage.Seconds(7 * 24 * time.Hour)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			tx, err := s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			// The messages' statements: TestAPurgeDoesNotWalkABlockedBacklog.
			for _, name := range []string{"message_purge_queue"} {
				if _, err := tx.Exec(ctx, "PREPARE "+name+"_"+mode+" AS "+queries.Get(name)); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				// Run for real, in the transaction rolled back.
				plan := explainAnalyze(t, ctx, tx, fmt.Sprintf("EXECUTE %s_%s(%v, %d)", name, mode, older, limit))
				deleted, read := plan.tableRows()
				if deleted != limit {
					t.Fatalf("%s deleted %v rows, want %d", name, deleted, limit)
				}
				if read > 6*limit {
					t.Errorf("%s read %v rows of mf_queue and mf_messages (a backlog of %d) to delete %d:\n%s",
						name, read, rows, limit, plan.String())
				}
			}
		})
	}
}

// openMigrated opens a store of poolSize connections in the test's own
// schema, migrated; it is closed when the test ends.
func openMigrated(t *testing.T, ctx context.Context, poolSize int32) *Store {
	t.Helper()
	s, err := Open(ctx, Options{URL: pgtest.NewSchema(t), PoolSize: poolSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// explainAnalyze runs query under EXPLAIN (ANALYZE, FORMAT JSON) on q and
// returns its plan's root.
func explainAnalyze(t *testing.T, ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, query string) planNode {
	t.Helper()
	var plan []byte
	if err := q.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+query).Scan(&plan); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	var root []struct{ Plan planNode }
	if err := json.Unmarshal(plan, &root); err != nil || len(root) != 1 {
		t.Fatalf("%s: plan %s: %v", query, plan, err)
	}
	return root[0].Plan
}

// planNode is one node of an EXPLAIN (ANALYZE, FORMAT JSON) plan.
type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Filtered float64    `json:"Rows Removed by Filter"`
	Rechecks float64    `json:"Rows Removed by Index Recheck"`
	Plans    []planNode `json:"Plans"`
}

// String draws the plan one node a line, with the rows each read.
func (n planNode) String() string {
	var b strings.Builder
	var draw func(planNode, string)
	draw = func(n planNode, indent string) {
		fmt.Fprintf(&b, "%s%s", indent, n.NodeType)
		if n.Relation != "" {
			fmt.Fprintf(&b, " on %s", n.Relation)
		}
		fmt.Fprintf(&b, " (rows %v, removed %v, loops %v)\n", n.Rows, n.Filtered+n.Rechecks, n.Loops)
		for _, c := range n.Plans {
			draw(c, indent+"  ")
		}
	}
	draw(n, "")
	return b.String()
}

// tableRows returns the rows the plan's top ModifyTable deleted (the rows
// its child fed it) and the rows its scans of mf_queue and mf_messages read,
// those their filters dropped included.
func (n planNode) tableRows() (deleted, read float64) {
	if n.NodeType == "ModifyTable" && len(n.Plans) > 0 {
		deleted = n.Plans[0].Rows * n.Plans[0].Loops
	}
	var walk func(planNode)
	walk = func(n planNode) {
		if n.NodeType != "ModifyTable" && (n.Relation == "mf_queue" || n.Relation == "mf_messages") {
			read += (n.Rows + n.Filtered + n.Rechecks) * n.Loops
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(n)
	return deleted, read
}

// A purge call deletes in transactions of at most storage.PurgeChunk rows of each
// table: the sweeper's 10,000 rows in one transaction held their row locks
// (an operator's resend of one of them waits) and the fence's lock on the
// lease row for the whole call, 2 to 7 s a call on an aged store
// (bench/pgage), and left a vacuum nothing to reclaim until it committed.
func TestAPurgeCallDeletesInTransactionsOfAThousandRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := openMigrated(t, ctx, 2)
	const rows = 5 * storage.PurgeChunk
	for _, q := range []string{
		`INSERT INTO mf_messages (inbound, payload, status, received_at)
		  SELECT 'in', '\x4d5348'::bytea, 'routed', now() - interval '30 days' + g * interval '1 second'
		    FROM generate_series(1, ` + fmt.Sprint(rows) + `) g`,
		`INSERT INTO mf_queue (message_id, destination, lane, status, updated_at)
		  SELECT id, 'd', 'd/' || (id % 100), 'done', received_at FROM mf_messages`,
		// Which transaction deleted each row.
		`CREATE TABLE purge_log (tbl text, xid xid8)`,
		`CREATE FUNCTION purge_log() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO purge_log VALUES (TG_TABLE_NAME, pg_current_xact_id()); RETURN OLD; END $$`,
		`CREATE TRIGGER purge_log AFTER DELETE ON mf_queue FOR EACH ROW EXECUTE FUNCTION purge_log()`,
		`CREATE TRIGGER purge_log AFTER DELETE ON mf_messages FOR EACH ROW EXECUTE FUNCTION purge_log()`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: 7 * 24 * time.Hour, Limit: rows})
	if err != nil {
		t.Fatal(err)
	}
	if res.QueueRows != rows || res.Messages != rows {
		t.Fatalf("purged %d queue rows and %d messages, want %d of each", res.QueueRows, res.Messages, rows)
	}
	tx, err := s.pool.Query(ctx, `SELECT tbl, count(*) FROM purge_log GROUP BY tbl, xid ORDER BY 2 DESC, 1`)
	if err != nil {
		t.Fatal(err)
	}
	type txRows struct {
		Table string
		Rows  int64
	}
	txs, err := pgx.CollectRows(tx, pgx.RowToStructByPos[txRows])
	if err != nil {
		t.Fatal(err)
	}
	if len(txs) == 0 || txs[0].Rows > storage.PurgeChunk {
		t.Fatalf("a purge of %d rows of each table deleted %v (rows of a table in one transaction, the largest first): want at most %d in each", rows, txs, storage.PurgeChunk)
	}
}

// A purge with a backlog older than the cut-off that cannot be purged yet (a
// destination blocked for weeks: months of messages whose rows are pending)
// deletes the finished messages and the never-routed ones, never a message
// that still has a queue row, and reads about as many rows as it deletes:
// it does not walk the backlog at every call, in custom or generic plans.
// The messages' purge walked every message past the cut-off, oldest first,
// looking each up in mf_queue, until it found its limit: the whole backlog
// at every call, and at every chunk of one (2 to 7 s a call with 1.6
// million blocked messages, bench/pgage). Every statement of the real
// purge is seen by auto_explain, which sends its plan as a notice.
func TestAPurgeDoesNotWalkABlockedBacklog(t *testing.T) {
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) { purgeWithABlockedBacklog(t, mode) })
	}
}

func purgeWithABlockedBacklog(t *testing.T, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const backlog, limit = 30000, 2000
	plans := &autoExplained{}
	u, err := url.Parse(pgtest.NewSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c plan_cache_mode="+mode+" -c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=0"+
		" -c auto_explain.log_analyze=on -c auto_explain.log_timing=off -c auto_explain.log_format=json -c auto_explain.log_level=notice")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx takes + for itself
	s, err := Open(ctx, Options{URL: u.String(), PoolSize: 2, onNotice: plans.notice})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	exec := func(stmts ...string) {
		t.Helper()
		for _, q := range stmts {
			if _, err := s.pool.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	// The backlog: a month old, each message taken by lab and pending for
	// ehr. Then finished messages and never-routed ones, younger but past
	// the cut-off; messages of both kinds come again for the second purge.
	exec(`INSERT INTO mf_messages (inbound, payload, status, received_at)
	      SELECT 'in', '\x4d5348'::bytea, 'routed', now() - interval '30 days' + g * interval '1 second'
	        FROM generate_series(1, `+fmt.Sprint(backlog)+`) g`,
		`INSERT INTO mf_queue (message_id, destination, lane, status, updated_at)
	      SELECT id, d, d || '/' || (id % 100), CASE d WHEN 'lab' THEN 'done' ELSE 'pending' END, received_at
	        FROM mf_messages, unnest(ARRAY['lab', 'ehr']) d ORDER BY id, d DESC`)
	young := func(days, finished, unrouted int) {
		exec(`INSERT INTO mf_messages (inbound, payload, status, received_at)
		      SELECT 'in', '\x4d5348'::bytea, CASE WHEN g <= `+fmt.Sprint(finished)+` THEN 'routed' ELSE 'unrouted' END,
		             now() - interval '`+fmt.Sprint(days)+` days' + g * interval '1 second'
		        FROM generate_series(1, `+fmt.Sprint(finished+unrouted)+`) g`,
			`INSERT INTO mf_queue (message_id, destination, lane, status, updated_at)
		      SELECT id, 'lab', 'lab/' || (id % 100), 'done', received_at FROM mf_messages m
		       WHERE status = 'routed' AND NOT EXISTS (SELECT 1 FROM mf_queue q WHERE q.message_id = m.id)`,
			`ANALYZE mf_messages`, `ANALYZE mf_queue`)
	}
	young(20, 3000, 300)
	older := 7 * 24 * time.Hour

	// purge runs the sweeper's calls until one leaves nothing behind, and
	// returns the rows they deleted and read.
	purge := func() (deleted int64, read float64) {
		t.Helper()
		plans.take()
		for {
			r, err := s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: older, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			deleted += r.QueueRows + r.Messages
			if r.QueueRows < limit && r.Messages < limit && !r.More {
				break
			}
		}
		var most float64
		for _, p := range plans.take() {
			_, n := p.Plan.tableRows()
			read += n
			most = max(most, n)
			// A walk of the messages may read a chunk of them, and look
			// each up in mf_queue, once.
			if n > 3*storage.PurgeChunk {
				t.Errorf("a statement of the purge read %v rows of mf_queue and mf_messages (a blocked backlog of %d):\n%s\n%s",
					n, backlog, p.Query, p.Plan.String())
			}
		}
		t.Logf("the purge deleted %d rows and read %v, at most %v in one statement", deleted, read, most)
		return deleted, read
	}
	check := func(when string) {
		t.Helper()
		var msgs, unqueued, orphans int64
		if err := s.pool.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM mf_messages),
			       (SELECT count(*) FROM mf_messages m WHERE NOT EXISTS (SELECT 1 FROM mf_queue q WHERE q.message_id = m.id)),
			       (SELECT count(*) FROM mf_queue q WHERE NOT EXISTS (SELECT 1 FROM mf_messages m WHERE m.id = q.message_id))`).
			Scan(&msgs, &unqueued, &orphans); err != nil {
			t.Fatal(err)
		}
		if msgs != backlog || unqueued != 0 || orphans != 0 {
			t.Fatalf("%s: %d messages left (%d with no queue row), %d queue rows of a message deleted; want the %d of the backlog, each with its row",
				when, msgs, unqueued, orphans, backlog)
		}
	}
	purge()
	check("after the first purge")
	young(19, 1000, 100)
	deleted, read := purge()
	check("after the second purge")
	if read > 4*float64(deleted) {
		t.Errorf("the second purge read %v rows of mf_queue and mf_messages to delete %d (a blocked backlog of %d)", read, deleted, backlog)
	}
}

// autoExplained collects the plans auto_explain sends as notices.
type autoExplained struct {
	mu    sync.Mutex
	plans []explainedPlan
}

type explainedPlan struct {
	Query string   `json:"Query Text"`
	Plan  planNode `json:"Plan"`
}

func (e *autoExplained) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	i := strings.Index(n.Message, "{")
	if i < 0 {
		return
	}
	var p explainedPlan
	if json.Unmarshal([]byte(n.Message[i:]), &p) != nil {
		return
	}
	e.mu.Lock()
	e.plans = append(e.plans, p)
	e.mu.Unlock()
}

// take returns the plans seen since the last call.
func (e *autoExplained) take() []explainedPlan {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.plans
	e.plans = nil
	return p
}

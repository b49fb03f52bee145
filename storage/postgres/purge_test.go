package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
			for _, name := range []string{"message_purge_queue", "message_purge_messages"} {
				if _, err := tx.Exec(ctx, "PREPARE "+name+"_"+mode+" AS "+queries.Get(name)); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				// Run for real (the messages' purge finds what the queue
				// rows' purge left), in the transaction rolled back.
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

// A purge call deletes in transactions of at most purgeChunk rows of each
// table: the sweeper's 10,000 rows in one transaction held their row locks
// (an operator's resend of one of them waits) and the fence's lock on the
// lease row for the whole call, 2 to 7 s a call on an aged store
// (bench/pgage), and left a vacuum nothing to reclaim until it committed.
func TestAPurgeCallDeletesInTransactionsOfAThousandRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := openMigrated(t, ctx, 2)
	const rows = 5 * purgeChunk
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
	if len(txs) == 0 || txs[0].Rows > purgeChunk {
		t.Fatalf("a purge of %d rows of each table deleted %v (rows of a table in one transaction, the largest first): want at most %d in each", rows, txs, purgeChunk)
	}
}

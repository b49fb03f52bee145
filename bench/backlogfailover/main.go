// Command backlogfailover measures a failover (PostgreSQL, two clustered
// nodes) or a restart (SQLite, one node) while the queue holds a large
// backlog for a destination that is down, and the drain once it is back.
//
//	go run ./bench/backlogfailover -store postgres -rows 500000 -lanes 50000
//	go run ./bench/backlogfailover -store sqlite -rows 500000 -lanes 50000
//
// It writes the backlog straight into a fresh store (rows N in L lanes of
// destination "down", N/L per lane, every head backing off as after a long
// outage, -inflight lanes' first rows in flight under a dead owner), starts
// node A (PostgreSQL: and standby B) with heartbeat/fence/TTL 1/2/3 s, lets
// A lead for -lead, kills it with SIGKILL (SQLite: kills it and starts it
// again) and prints, counted from the kill: when the new primary's MLLP
// port took a connection and the first AA came back, its log's promotion
// steps, its peak memory and its most lane actors at once, the latency of
// new messages for idle lanes of the down destination and of a healthy one,
// and how long GET /lanes, /cluster/status and /metrics took. After -outage
// the destination comes back (with -draining, before the kill: the primary
// dies while it drains): it prints the drain rate, and the sink checks that
// every lane arrived in order with nothing lost. bench/README.md has the
// flags; the README's Failover section, the figures.
//
// Needs: Go; for postgres, PostgreSQL at -pg (a scratch database named -db
// is made and dropped).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/messagefoundry/mf/hl7"
)

var (
	store    = flag.String("store", "postgres", "postgres (two clustered nodes) or sqlite (one node)")
	rows     = flag.Int("rows", 100000, "backlogged rows")
	lanes    = flag.Int("lanes", 10000, "lanes they are in (rows must be a multiple)")
	inflight = flag.Int("inflight", 1000, "lanes whose first rows are in flight under a dead owner at the kill")
	lead     = flag.Duration("lead", 5*time.Second, "how long node A leads before the kill")
	outage   = flag.Duration("outage", 20*time.Second, "how long after the kill the destination comes back")
	pgURL    = flag.String("pg", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL server")
	dbName   = flag.String("db", "mf_bl_failover", "scratch database (postgres)")
	portBase = flag.Int("ports", 22100, "first of 8 ports to use")
	mfBin    = flag.String("mf", "", "mf binary (default: built from this checkout)")
	keep     = flag.Bool("keep", false, "keep the work directory and database")
	draining = flag.Bool("draining", false, "kill node A while it drains (the destination is back before the kill) instead of during the outage")
	dueIn    = flag.Duration("due", 0, "heads come due spread over this long after the lead's start (default: 30 s to 2 min after the seed, or at once with -draining)")
	drainFor = flag.Duration("drainfor", 0, "stop after draining this long (0: until every row has arrived); then lost is not counted")
	seedOnly = flag.Bool("seedonly", false, "postgres: write the backlog into -db, print the EXPLAINs if asked, and stop (the database is kept)")
	explain  = flag.Bool("explain", false, "postgres: EXPLAIN ANALYZE the recovery, listing and claim statements on the backlog first")
)

const token = "backlog-bench-token"

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "backlogfailover:", err)
		os.Exit(1)
	}
}

type node struct {
	name string
	cmd  *exec.Cmd
	log  string
	mllp int // in_down
	up   int // in_up
	api  int
}

func run() error {
	if *rows%*lanes != 0 {
		return fmt.Errorf("-rows must be a multiple of -lanes")
	}
	work, err := os.MkdirTemp("", "mf-backlog-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(work)
	}
	bin := *mfBin
	if bin == "" {
		bin = filepath.Join(work, "mf")
		b := exec.Command("go", "build", "-o", bin, ".")
		b.Stdout, b.Stderr = os.Stderr, os.Stderr
		if err := b.Run(); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	p := *portBase
	downPort, upPort := p, p+1
	nodes := []*node{{name: "a", mllp: p + 2, up: p + 3, api: p + 4}}
	if *store == "postgres" {
		nodes = append(nodes, &node{name: "b", mllp: p + 5, up: p + 6, api: p + 7})
	}
	ctx := context.Background()
	var dbURL string
	if *store == "postgres" {
		dbURL, err = makeDatabase(ctx)
		if err != nil {
			return err
		}
		defer func() {
			if !*keep {
				dropDatabase(context.Background())
			}
		}()
	}
	for _, n := range nodes {
		n.log = filepath.Join(work, n.name+".log")
		if err := os.WriteFile(filepath.Join(work, n.name+".toml"), []byte(configFor(n, dbURL, filepath.Join(work, "mf.db"), downPort, upPort)), 0o600); err != nil {
			return err
		}
	}
	if out, err := exec.Command(bin, "migrate", "--config", filepath.Join(work, "a.toml")).CombinedOutput(); err != nil {
		return fmt.Errorf("migrate: %v: %s", err, out)
	}
	t0 := time.Now()
	if *store == "postgres" {
		err = seedPostgres(ctx, dbURL)
	} else {
		err = seedSQLite(filepath.Join(work, "mf.db"))
	}
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	fmt.Printf("backlog: %d rows in %d lanes (%d lanes' first rows in flight under a dead owner), written in %.1fs; store %s\n",
		*rows, *lanes, *inflight, time.Since(t0).Seconds(), *store)
	if *explain && *store == "postgres" {
		if err := explainAll(ctx, dbURL); err != nil {
			return err
		}
	}
	if *seedOnly {
		*keep = true // the deferred drop reads it
		return nil
	}

	down := newSink(downPort, true) // a blackhole until the outage ends
	defer down.close()
	up := newSink(upPort, false)
	defer up.close()

	start := func(n *node) error {
		f, err := os.Create(n.log)
		if err != nil {
			return err
		}
		n.cmd = exec.Command(bin, "--log-level", "info", "run", "--config", filepath.Join(work, n.name+".toml"))
		n.cmd.Dir = work
		n.cmd.Stdout, n.cmd.Stderr = f, f
		return n.cmd.Start()
	}
	defer func() {
		for _, n := range nodes {
			if n.cmd != nil && n.cmd.Process != nil {
				_ = n.cmd.Process.Kill()
				_, _ = n.cmd.Process.Wait()
			}
		}
	}()
	a := nodes[0]
	started := time.Now()
	if err := start(a); err != nil {
		return err
	}
	if err := waitPort(a.mllp, 60*time.Second); err != nil {
		return fmt.Errorf("node a: %w (log %s)", err, a.log)
	}
	fmt.Printf("node a, started on the backlog, bound its port %.2fs after its start\n", time.Since(started).Seconds())
	next := a
	if len(nodes) == 2 {
		if err := start(nodes[1]); err != nil {
			return err
		}
		if err := waitAPI(nodes[1].api, 30*time.Second); err != nil {
			return err
		}
		next = nodes[1]
	}
	if *draining {
		down.open()
	}
	time.Sleep(*lead)
	inflightAtKill := -1
	if *store == "postgres" {
		inflightAtKill = countInflight(ctx, dbURL)
	}
	kill := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	_, _ = a.cmd.Process.Wait()
	a.cmd = nil
	fmt.Printf("killed node a (SIGKILL) %.1fs after it bound its port; rows in flight at the kill: %d\n", lead.Seconds(), inflightAtKill)
	if *store == "sqlite" {
		a.log = filepath.Join(work, "a2.log")
		if err := start(a); err != nil {
			return err
		}
	}

	// The partner: dial the next primary until it answers, one message of
	// an idle lane; then a probe every 200 ms to each inbound.
	claimed := make(chan time.Time, 1)
	if *store == "postgres" {
		go firstClaim(ctx, dbURL, "node-"+next.name+"#", kill, claimed)
	} else {
		go firstClaimSQLite(filepath.Join(work, "mf.db"), kill, claimed)
	}
	bound, aa, err := firstAA(next.mllp, kill)
	if err != nil {
		return err
	}
	fmt.Printf("(a) from the kill: port took a connection at %.2fs, first AA at %.2fs\n", bound.Sub(kill).Seconds(), aa.Sub(kill).Seconds())
	graph := printLog(next.log, kill)
	select {
	case t := <-claimed:
		after := ""
		if !graph.IsZero() {
			after = fmt.Sprintf(", %.2fs after its graph started", t.Sub(graph).Seconds())
		}
		fmt.Printf("(b) first row of the backlog claimed by the new primary at %.2fs after the kill%s\n", t.Sub(kill).Seconds(), after)
	case <-time.After(60 * time.Second):
		fmt.Println("(b) no row of the backlog claimed by the new primary within 60 s of the kill")
	}

	stopSample := make(chan struct{})
	var peakRSS, peakLanes, peakGoroutines float64
	var scrapes []time.Duration // the sampler's /metrics, every 250 ms
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		for {
			select {
			case <-stopSample:
				return
			case <-time.After(250 * time.Millisecond):
			}
			if rss := rssOf(next.cmd.Process.Pid); rss > peakRSS {
				peakRSS = rss
			}
			m, took := scrape(next.api)
			scrapes = append(scrapes, took)
			if v := metric(m, "mf_lanes_active"); v > peakLanes {
				peakLanes = v
			}
			if v := metric(m, "go_goroutines"); v > peakGoroutines {
				peakGoroutines = v
			}
		}
	}()

	probes := &prober{}
	probeStop := make(chan struct{})
	var probing sync.WaitGroup
	probing.Add(2)
	go func() { defer probing.Done(); probes.loop(next.mllp, "PD", probeStop) }()
	go func() { defer probing.Done(); probes.loop(next.up, "PU", probeStop) }()

	apiTimes(next.api, "(while the destination is down)")
	back := time.Now()
	if !*draining {
		if d := time.Until(kill.Add(*outage)); d > 0 {
			time.Sleep(d)
		}
		fmt.Printf("probes while down: in_up (healthy destination) %s; in_down AA %s\n", up.latency("PU", probes), probes.ackSummary("PD"))
		back = time.Now()
		down.open()
		fmt.Printf("destination back at %.2fs after the kill\n", back.Sub(kill).Seconds())
	}
	want := *rows
	half := false
	for {
		got := down.uniqueOf("L")
		if !half && got >= want/2 {
			half = true
			apiTimes(next.api, "(draining)")
		}
		if got >= want {
			break
		}
		if time.Since(back) > 30*time.Minute || (*drainFor > 0 && time.Since(back) > *drainFor) {
			fmt.Printf("drain stopped after %.0fs\n", time.Since(back).Seconds())
			want = got
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	drained := time.Since(back)
	close(probeStop)
	probing.Wait()
	close(stopSample)
	sampled.Wait()
	u, dup, reord, lost := down.check(*lanes, *rows / *lanes)
	if want < *rows {
		lost = -1 // not drained: not counted
	}
	fmt.Printf("(d) drained %d rows in %.1fs: %.0f rows/s; unique %d, duplicates %d, reordered %d, lost %d\n",
		want, drained.Seconds(), float64(want)/drained.Seconds(), u, dup, reord, lost)
	fmt.Printf("(c) new primary: peak RSS %.0f MiB, most lane actors at once %.0f, most goroutines %.0f\n", peakRSS, peakLanes, peakGoroutines)
	fmt.Printf("GET /metrics every 250 ms from the first claim on: %s\n", summary(scrapes))
	fmt.Printf("probes during the drain: in_down (idle lanes of the draining destination) %s; in_up %s\n",
		down.latencyAfter("PD", probes, back), up.latencyAfter("PU", probes, back))
	return nil
}

func configFor(n *node, dbURL, dbPath string, downPort, upPort int) string {
	sum := sha256.Sum256([]byte(token))
	var storeCfg string
	if dbURL != "" {
		storeCfg = fmt.Sprintf(`[store]
backend = "postgres"
url = %q
pool_size = 10

[cluster]
enabled = true
node_id = "node-%s"
heartbeat_seconds = 1.0
leader_fence_timeout_seconds = 2.0
leader_lease_ttl_seconds = 3.0
`, dbURL, n.name)
	} else {
		storeCfg = fmt.Sprintf("[store]\nbackend = \"sqlite\"\npath = %q\n", dbPath)
	}
	return storeCfg + fmt.Sprintf(`
[api]
listen = "127.0.0.1:%d"
metrics_public = true
[[api.tokens]]
name = "bench"
role = "viewer"
sha256 = "%s"

[[inbound]]
name = "in_down"
type = "mllp"
listen = "127.0.0.1:%d"

[[inbound]]
name = "in_up"
type = "mllp"
listen = "127.0.0.1:%d"

[[outbound]]
name = "down"
type = "mllp"
address = "127.0.0.1:%d"
retry_base_seconds = 1
retry_max_seconds = 120

[[outbound]]
name = "up"
type = "mllp"
address = "127.0.0.1:%d"

[[route]]
from = "in_down"
to = ["down"]
lane_key = "PID-3.1"

[[route]]
from = "in_up"
to = ["up"]
lane_key = "PID-3.1"
`, n.api, hex.EncodeToString(sum[:]), n.mllp, n.up, downPort, upPort)
}

func serverURL(db string) string {
	return strings.Replace(*pgURL, "/postgres?", "/"+db+"?", 1)
}

func makeDatabase(ctx context.Context) (string, error) {
	c, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+*dbName+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := c.Exec(ctx, "CREATE DATABASE "+*dbName); err != nil {
		return "", err
	}
	return serverURL(*dbName), nil
}

func dropDatabase(ctx context.Context) {
	c, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+*dbName+" WITH (FORCE)")
}

// payloadSQL builds, in SQL, the message of lane l (PID-3.1 "L<l>"),
// sequence s (PV1-19.1, the sink's order check).
const payloadSQL = `'MSH|^~\&|MFBENCH|BENCH|MF|GENHOSP|20261127000000||ADT^A01^ADT_A01|BL-L' || l || '-' || s || '|P|2.5.1' || chr(13) ||
 'PID|1||L' || l || '^^^GENHOSP^MR||DOE^JANE||19800101|F' || chr(13) ||
 'PV1|1|I|||||||||||||||||' || s || '^^^BL^VN' || chr(13)`

// dueFrom and dueSpread: when the heads come due, seconds after the seed.
func dueFrom() float64 {
	if *dueIn == 0 && !*draining {
		return 30
	}
	return 0
}

func dueSpread() float64 {
	if *dueIn == 0 && !*draining {
		return 90
	}
	return dueIn.Seconds()
}

func seedPostgres(ctx context.Context, url string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	stmts := []string{
		fmt.Sprintf(`INSERT INTO mf_messages (inbound, control_id, message_type, payload, status)
SELECT 'in_down', 'BL-L' || l || '-' || s, 'ADT^A01', convert_to(%s, 'UTF8'), 'routed'
  FROM (SELECT g, g %% %d AS l, g / %d + 1 AS s FROM generate_series(0, %d) g) x ORDER BY g`, payloadSQL, *lanes, *lanes, *rows-1),
		fmt.Sprintf(`INSERT INTO mf_queue (message_id, destination, lane, created_at)
SELECT id, 'down', 'down/L' || ((id - 1) %% %d), now() - interval '3 hours' FROM mf_messages ORDER BY id`, *lanes),
		// Every head backing off, as after hours of outage, due within 2 min.
		fmt.Sprintf(`UPDATE mf_queue SET attempts = 30, next_attempt_at = now() + make_interval(secs => %f + %f * random()),
       last_error = 'dial tcp: connection refused'
 WHERE id <= %d`, dueFrom(), dueSpread(), *lanes),
		// Some lanes' first rows in flight under a dead owner, lease live.
		fmt.Sprintf(`UPDATE mf_queue SET status = 'inflight', lease_owner = 'node-dead', lease_expires_at = now() + interval '60 seconds', attempts = attempts + 1
 WHERE id %% %d < %d AND id <= %d`, *lanes, *inflight, 8**lanes),
		`ANALYZE mf_queue`, `ANALYZE mf_messages`,
	}
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("%.60s…: %w", s, err)
		}
	}
	return nil
}

func seedSQLite(path string) error {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return err
	}
	defer db.Close()
	payload := strings.ReplaceAll(payloadSQL, "chr(13)", "char(13)")
	stmts := []string{
		`PRAGMA journal_mode = WAL`,
		fmt.Sprintf(`WITH RECURSIVE g(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM g WHERE g < %d)
INSERT INTO mf_messages (inbound, control_id, message_type, payload, status)
SELECT 'in_down', 'BL-L' || l || '-' || s, 'ADT^A01', CAST(%s AS BLOB), 'routed'
  FROM (SELECT g, g %% %d AS l, g / %d + 1 AS s FROM g) ORDER BY g`, *rows-1, payload, *lanes, *lanes),
		fmt.Sprintf(`INSERT INTO mf_queue (message_id, destination, lane, created_at)
SELECT id, 'down', 'down/L' || ((id - 1) %% %d), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - 3 * 3600 * 1000 FROM mf_messages ORDER BY id`, *lanes),
		fmt.Sprintf(`UPDATE mf_queue SET attempts = 30, next_attempt_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + %d + abs(random() %% %d),
       last_error = 'dial tcp: connection refused'
 WHERE id <= %d`, int(dueFrom()*1000), int(dueSpread()*1000)+1, *lanes),
		fmt.Sprintf(`UPDATE mf_queue SET status = 'inflight', lease_owner = 'node-dead', lease_expires_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + 60000, attempts = attempts + 1
 WHERE id %% %d < %d AND id <= %d`, *lanes, *inflight, 8**lanes),
		`ANALYZE`,
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			return fmt.Errorf("%.60s…: %w", s, err)
		}
	}
	return nil
}

func countInflight(ctx context.Context, url string) int {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return -1
	}
	defer c.Close(ctx)
	var n int
	_ = c.QueryRow(ctx, "SELECT count(*) FROM mf_queue WHERE status = 'inflight'").Scan(&n)
	return n
}

// explainAll prints EXPLAIN ANALYZE of the promotion recovery, the lanes'
// listing, the stats and a lane claim, each rolled back.
func explainAll(ctx context.Context, url string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("storage/postgres/sql", name+".sql"))
		if err != nil {
			panic(err)
		}
		return string(b)
	}
	cases := []struct {
		name string
		args []any
	}{
		{"queue_recover_foreign", []any{""}},
		{"queue_lanes", []any{"", 1000}}, // the first page of the manager's listing
		{"queue_stats", nil},
		{"queue_claim_next", []any{"down/L0", "bench", 60, int64(0), 8}},
	}
	for _, k := range cases {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		r, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+read(k.name), k.args...)
		if err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("%s: %w", k.name, err)
		}
		fmt.Printf("--- EXPLAIN ANALYZE %s\n", k.name)
		for r.Next() {
			var line string
			_ = r.Scan(&line)
			fmt.Println(line)
		}
		r.Close()
		_ = tx.Rollback(ctx)
	}
	return timeListings(ctx, c, read("queue_lanes"))
}

// oneStatementListing is the lane listing as one statement, as it was
// before the listing came in pages (build 684677f): timed against the walk
// of pages that replaced it.
const oneStatementListing = `SELECT q.lane, q.destination, d.depth, q.id, q.message_id, q.status, q.attempts, q.next_attempt_at,
       q.lease_owner, q.lease_expires_at, q.last_error, q.created_at, q.updated_at, q.held,
       EXTRACT(EPOCH FROM now() - q.created_at)::float8,
       (q.status = 'pending' AND NOT q.held AND q.next_attempt_at <= now()) OR (q.status = 'inflight' AND q.lease_expires_at <= now()),
       q.last_error_detail
  FROM (SELECT lane, count(*) AS depth, min(id) AS head_id FROM mf_queue
         WHERE status IN ('pending', 'inflight') GROUP BY lane) d
  JOIN mf_queue q ON q.id = d.head_id
 ORDER BY q.lane`

// timeListings prints, three times each, how long the lane listing takes
// as one statement, as a walk of pages of 5,000 (a listing with no limit:
// GET /lanes), and its first page of 1,000 (what a new primary's first
// lanes wait for), rows read and discarded.
func timeListings(ctx context.Context, c *pgx.Conn, page string) error {
	// drain reads a listing's rows and returns how many and the last lane.
	drain := func(sql string, args ...any) (n int, last string, err error) {
		r, err := c.Query(ctx, sql, args...)
		if err != nil {
			return 0, "", err
		}
		defer r.Close()
		for r.Next() {
			v, err := r.Values()
			if err != nil {
				return n, last, err
			}
			n++
			last, _ = v[0].(string)
		}
		return n, last, r.Err()
	}
	for round := 1; round <= 3; round++ {
		t := time.Now()
		n, _, err := drain(oneStatementListing)
		if err != nil {
			return err
		}
		one := time.Since(t)
		t, total, pages := time.Now(), 0, 0
		for after := ""; ; {
			k, last, err := drain(page, after, 5000)
			if err != nil {
				return err
			}
			total, pages, after = total+k, pages+1, last
			if k < 5000 {
				break
			}
		}
		walk := time.Since(t)
		t = time.Now()
		first, _, err := drain(page, "", 1000)
		if err != nil {
			return err
		}
		fmt.Printf("listing round %d: one statement %d lanes in %.3fs; %d pages of 5,000: %d lanes in %.3fs; first page of %d in %.1f ms\n",
			round, n, one.Seconds(), pages, total, walk.Seconds(), first, time.Since(t).Seconds()*1000)
	}
	return nil
}

// firstClaimSQLite is firstClaim for the node restarted on SQLite: a row
// of the backlog in flight or done, written after the kill.
func firstClaimSQLite(path string, kill time.Time, out chan<- time.Time) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return
	}
	defer db.Close()
	for time.Since(kill) < 60*time.Second {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM mf_queue WHERE id <= ? AND status IN ('inflight', 'done') AND updated_at > ?`,
			*rows, kill.UnixMilli()).Scan(&n); err == nil && n > 0 {
			out <- time.Now()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// firstClaim reports when a row of the backlog (ids 1 to -rows: not the
// partner's probes, whose idle lanes are claimed at once) is first in flight
// under owner (a prefix), or done over a second after the kill (a row
// claimed and delivered between two looks; the dead node's last commits
// come first).
func firstClaim(ctx context.Context, url, owner string, kill time.Time, out chan<- time.Time) {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	for time.Since(kill) < 60*time.Second {
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM mf_queue
 WHERE id <= $2 AND ((status = 'inflight' AND lease_owner LIKE $1) OR (status = 'done' AND updated_at > $3))`,
			owner+"%", *rows, kill.Add(time.Second)).Scan(&n); err == nil && n > 0 {
			out <- time.Now()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitPort(port int, d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on %d", port)
}

func waitAPI(port int, d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
		if err == nil {
			r.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no API on %d", port)
}

func frame(lane string, seq int, run string) []byte {
	msg := fmt.Sprintf("MSH|^~\\&|MFBENCH|BENCH|MF|GENHOSP|20261127000000||ADT^A01^ADT_A01|%s-%s-%d|P|2.5.1\rPID|1||%s^^^GENHOSP^MR||DOE^JANE||19800101|F\rPV1|1|I|||||||||||||||||%d^^^%s^VN\r", run, lane, seq, lane, seq, run)
	return append(append([]byte{0x0b}, msg...), 0x1c, 0x0d)
}

// exchange sends one message and waits for its ACK code.
func exchange(c net.Conn, f []byte) (string, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(f); err != nil {
		return "", err
	}
	buf := make([]byte, 0, 512)
	tmp := make([]byte, 512)
	for !bytes.Contains(buf, []byte{0x1c, 0x0d}) {
		n, err := c.Read(tmp)
		if err != nil {
			return "", err
		}
		buf = append(buf, tmp[:n]...)
	}
	m := regexp.MustCompile(`MSA\|([A-Z]{2})`).FindSubmatch(buf)
	if m == nil {
		return "", fmt.Errorf("no MSA in %q", buf)
	}
	return string(m[1]), nil
}

func firstAA(port int, kill time.Time) (bound, aa time.Time, err error) {
	for time.Since(kill) < 120*time.Second {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 500*time.Millisecond)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if bound.IsZero() {
			bound = time.Now()
		}
		code, err := exchange(c, frame("FIRST", 1, "PF"))
		c.Close()
		if err == nil && code == "AA" {
			return bound, time.Now(), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return bound, aa, fmt.Errorf("no AA within 120 s of the kill")
}

// prober sends, every 200 ms, one message of a new lane (seq 1) to an inbound.
type prober struct {
	mu   sync.Mutex
	sent map[string]time.Time // lane -> when its AA came
	acks map[string][]time.Duration
}

func (p *prober) loop(port int, prefix string, stop <-chan struct{}) {
	var c net.Conn
	for i := 0; ; i++ {
		select {
		case <-stop:
			if c != nil {
				c.Close()
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
		if c == nil {
			var err error
			if c, err = net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err != nil {
				c = nil
				continue
			}
		}
		lane := fmt.Sprintf("%s%d", prefix, i)
		t := time.Now()
		code, err := exchange(c, frame(lane, 1, prefix))
		if err != nil || code != "AA" {
			c.Close()
			c = nil
			continue
		}
		p.mu.Lock()
		if p.sent == nil {
			p.sent, p.acks = map[string]time.Time{}, map[string][]time.Duration{}
		}
		p.sent[lane] = time.Now()
		p.acks[prefix] = append(p.acks[prefix], time.Since(t))
		p.mu.Unlock()
	}
}

func (p *prober) ackSummary(prefix string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return summary(p.acks[prefix])
}

func summary(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	q := func(f float64) float64 { return d[int(f*float64(len(d)-1))].Seconds() * 1000 }
	return fmt.Sprintf("n=%d p50 %.1f ms p99 %.1f ms max %.1f ms", len(d), q(0.5), q(0.99), d[len(d)-1].Seconds()*1000)
}

// sink is an MLLP receiver: a blackhole (reads, never answers) until
// opened, then it ACKs and checks order per lane.
type sink struct {
	ln    net.Listener
	mu    sync.Mutex
	black bool
	conns map[net.Conn]bool
	maxs  map[string]int
	at    map[string]time.Time // lane -> first arrival
	uniq  map[string]int       // by lane prefix letter
	dup   int
	reord int
}

func newSink(port int, black bool) *sink {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		panic(err)
	}
	s := &sink{ln: ln, black: black, conns: map[net.Conn]bool{}, maxs: map[string]int{}, at: map[string]time.Time{}, uniq: map[string]int{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			go s.serve(c)
		}
	}()
	return s
}

func (s *sink) open() {
	s.mu.Lock()
	s.black = false
	for c := range s.conns {
		c.Close() // the sender reconnects and sends again
	}
	s.mu.Unlock()
}

func (s *sink) close() { s.ln.Close() }

var (
	pathLane = hl7.Path{Segment: "PID", Field: 3, Component: 1}
	pathSeq  = hl7.Path{Segment: "PV1", Field: 19, Component: 1}
)

func (s *sink) serve(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	fr := hl7.NewFrameReader(bufio.NewReader(c), 1<<20)
	for {
		payload, err := fr.ReadFrame()
		if err != nil {
			return
		}
		s.mu.Lock()
		black := s.black
		s.mu.Unlock()
		if black {
			continue
		}
		m, err := hl7.Parse(payload)
		if err != nil {
			return
		}
		lane := m.Get(pathLane)
		seq, _ := strconv.Atoi(m.Get(pathSeq))
		s.mu.Lock()
		switch max := s.maxs[lane]; {
		case seq <= max:
			s.dup++
		case seq == max+1:
			s.maxs[lane] = seq
			s.uniq[lane[:1]]++
			if seq == 1 {
				s.at[lane] = time.Now()
			}
		default:
			s.reord++
			s.maxs[lane] = seq
			s.uniq[lane[:1]]++
		}
		s.mu.Unlock()
		out, _ := hl7.AppendFrame(nil, hl7.Ack(m, hl7.AcceptCode(m, hl7.Accept), ""))
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func (s *sink) uniqueOf(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uniq[prefix]
}

// check counts the backlog's lanes L0..: unique, duplicates, reordered, lost.
func (s *sink) check(lanes, per int) (u, dup, reord, lost int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := 0; l < lanes; l++ {
		max := s.maxs[fmt.Sprintf("L%d", l)]
		u += max
		lost += per - max
	}
	return u, s.dup, s.reord, lost
}

func (s *sink) latency(prefix string, p *prober) string {
	return s.latencyAfter(prefix, p, time.Time{})
}

// latencyAfter: from each probe's AA to its arrival here, for probes ACKed
// after since.
func (s *sink) latencyAfter(prefix string, p *prober, since time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var d []time.Duration
	missing := 0
	for lane, t := range p.sent {
		if !strings.HasPrefix(lane, prefix) || t.Before(since) {
			continue
		}
		at, ok := s.at[lane]
		if !ok {
			missing++
			continue
		}
		d = append(d, at.Sub(t))
	}
	return fmt.Sprintf("%s (not arrived: %d)", summary(d), missing)
}

func rssOf(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func scrape(api int) (string, time.Duration) {
	t := time.Now()
	r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", api))
	if err != nil {
		return "", 0
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b), time.Since(t)
}

func metric(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{") {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return 0
}

// apiTimes times one GET of each path: /lanes whole and its first page of
// 1,000, /metrics twice in a row (the second shares the first's read of the
// queue counts, which a node keeps 5 s), then once more after those 5 s.
func apiTimes(api int, when string) {
	var parts []string
	for _, path := range []string{"/cluster/status", "/lanes", "/lanes?limit=1000", "/metrics", "/metrics", "wait", "/metrics"} {
		if path == "wait" {
			time.Sleep(5 * time.Second)
			continue
		}
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", api, path), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		t := time.Now()
		r, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s failed after %.2fs: %v", path, time.Since(t).Seconds(), err))
			continue
		}
		n, _ := io.Copy(io.Discard, r.Body)
		r.Body.Close()
		parts = append(parts, fmt.Sprintf("%s %d in %.3fs (%d KiB)", path, r.StatusCode, time.Since(t).Seconds(), n/1024))
	}
	fmt.Printf("API %s: %s\n", when, strings.Join(parts, "; "))
}

// printLog prints the new primary's leadership and listener lines, timed
// from the kill, and returns when its graph started (zero if not logged).
func printLog(path string, kill time.Time) (graph time.Time) {
	time.Sleep(200 * time.Millisecond)
	b, err := os.ReadFile(path)
	if err != nil {
		return graph
	}
	for _, l := range strings.Split(string(b), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		msg, _ := e["message"].(string)
		ts, _ := e["time"].(string)
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || t.Before(kill.Add(-time.Second)) {
			continue
		}
		if strings.Contains(msg, "leader") || strings.Contains(msg, "recover") || strings.Contains(msg, "listen") || strings.Contains(msg, "re-pended") || strings.Contains(msg, "graph") {
			fmt.Printf("  log %+.3fs %s\n", t.Sub(kill).Seconds(), msg)
		}
		if strings.HasPrefix(msg, "graph started") && graph.IsZero() {
			graph = t
		}
	}
	return graph
}

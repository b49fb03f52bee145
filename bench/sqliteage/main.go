// Command sqliteage ages a SQLite store fast and measures what months of
// running do to it: it writes the rows a node at a steady rate with
// retention leaves behind directly (days of finished messages, the oldest
// purged as each new day comes, as the sweeper does), then times what the
// engine does on such a store and watches the -wal file while mf backup's
// copy runs beside a live load.
//
//	go run ./bench/sqliteage age -path P [-messages 3000000] [-days 7] [-churn 3] [-payload 1000] [-backlog 0]
//	go run ./bench/sqliteage purge -path P [-retention-days 6] [-batches 5] [-limit 10000] [-backup]
//	go run ./bench/sqliteage measure -path P [-rate 300] [-retention-days 6] [-analyze]
//	go run ./bench/sqliteage blocked -path P [-backlog 500000] [-traffic-rate 2] [-retention-days 7] [-hours 3] [-payload 1000]
//	go run ./bench/sqliteage hourly -path P [-retention-days 7] [-limit 10000] [-rate 300]
//
// age writes with synchronous=OFF in transactions of 10,000 messages (the
// rows are what counts, not how they came); measure opens the store as mf
// run does (sqlite.Open) and changes it: it adds its load's rows, purges,
// and with -analyze runs ANALYZE on it. blocked writes a store with a
// destination blocked since before the cut-off, and hourly times the purge
// on it, its first run and the next hour's, beside a load (blocked.go).
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite"

	"github.com/messagefoundry/mf/bench/internal/ackwait"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sqliteage age|purge|measure|blocked|hourly -path P [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	path := fs.String("path", "", "the store's database file")
	messages := fs.Int("messages", 3_000_000, "age: messages retained at the end (spread over -days)")
	days := fs.Int("days", 7, "age: retention in days")
	churn := fs.Int("churn", 3, "age: days written past retention (the oldest day purged as each comes)")
	payload := fs.Int("payload", 1000, "payload bytes a message")
	backlog := fs.Int("backlog", 0, "age: the last messages' 'ehr' rows left pending (a destination down); blocked: the messages past the cut-off whose 'ehr' row is pending (default 500000)")
	trafficRate := fs.Float64("traffic-rate", 2, "blocked: messages/s of the traffic from -hours before the cut-off on")
	hours := fs.Float64("hours", 3, "blocked: hours of traffic before the cut-off")
	rate := fs.Int("rate", 300, "measure: live load, messages/s")
	retention := fs.Float64("retention-days", 6, "measure, purge: retention the purge is run with; blocked, hourly: the cut-off (default 7)")
	batches := fs.Int("batches", 5, "purge: sweeper batches to run")
	backup := fs.Bool("backup", false, "purge: then time mf backup's copy (with nothing else running) and print its size")
	limit := fs.Int("limit", storage.DefaultPurgeLimit, "purge: rows a batch (the sweeper's)")
	analyze := fs.Bool("analyze", false, "measure: run ANALYZE and show the plans after it too")
	fs.Parse(os.Args[2:])
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if os.Args[1] == "blocked" || os.Args[1] == "hourly" {
		if !set["retention-days"] {
			*retention = 7
		}
		if !set["backlog"] {
			*backlog = 500_000
		}
	}
	if *path == "" {
		fmt.Fprintln(os.Stderr, "sqliteage: -path is required")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "age":
		err = age(*path, *messages, *days, *churn, *payload, *backlog)
	case "purge":
		err = purge(*path, time.Duration(*retention*24*float64(time.Hour)), *batches, *limit, *backup)
	case "measure":
		err = measure(*path, *rate, *payload, time.Duration(*retention*24*float64(time.Hour)), *analyze)
	case "blocked":
		err = blocked(*path, *backlog, *trafficRate, time.Duration(*retention*24*float64(time.Hour)), *hours, *payload)
	case "hourly":
		err = hourly(*path, time.Duration(*retention*24*float64(time.Hour)), *limit, *rate, *payload)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqliteage:", err)
		os.Exit(1)
	}
}

func hl7(rng *rand.Rand, id int64, size int) []byte {
	head := fmt.Sprintf("MSH|^~\\&|ADT|HOSP|LAB|HOSP|20261127120000||ADT^A01|C%d|P|2.5\rPID|1||%d^^^HOSP||DOE^JANE||19700101|F\rPV1|1|I|W^%d\r",
		id, rng.IntN(1_000_000), rng.IntN(500))
	b := make([]byte, 0, size)
	b = append(b, head...)
	for len(b) < size {
		b = append(b, byte('A'+rng.IntN(26)))
	}
	return b[:size]
}

func rawDB(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	// No journal at all while aging: a crash leaves a file to throw away.
	q.Add("_pragma", "journal_mode(OFF)")
	q.Add("_pragma", "synchronous(OFF)")
	q.Add("_pragma", "cache_size(-262144)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// migratedRawDB is path's store, created and migrated as mf creates it,
// opened for aging (rawDB).
func migratedRawDB(path string) (*sql.DB, error) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.Close()
	return rawDB(path)
}

// age writes days+churn days of traffic, deleting the oldest day as each
// day past retention comes (queue rows first, then their messages, as
// message_purge_*.sql do), so freed pages are reused as a running store's
// are.
func age(path string, messages, days, churn, size, backlog int) error {
	ctx := context.Background()
	db, err := migratedRawDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	perDay := messages / days
	const dayMS = 86_400_000
	now := time.Now().UnixMilli()
	start := now - int64(days+churn)*dayMS
	step := float64(dayMS) / float64(perDay)
	rng := rand.New(rand.NewPCG(1, 2))
	total := (days + churn) * perDay
	began := time.Now()
	var id int64
	for d := 0; d < days+churn; d++ {
		if d >= days {
			cut := start + int64(d-days+1)*dayMS
			t := time.Now()
			if _, err := db.ExecContext(ctx, "DELETE FROM mf_queue WHERE status IN ('done', 'dead') AND updated_at < ?1", cut); err != nil {
				return err
			}
			if _, err := db.ExecContext(ctx, "DELETE FROM mf_messages WHERE received_at < ?1 AND NOT EXISTS (SELECT 1 FROM mf_queue q WHERE q.message_id = mf_messages.id)", cut); err != nil {
				return err
			}
			fmt.Printf("day %d: purged the oldest day in %v\n", d, time.Since(t).Round(time.Millisecond))
		}
		for i := 0; i < perDay; i += 10_000 {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			msg, _ := tx.PrepareContext(ctx, "INSERT INTO mf_messages (inbound, received_at, control_id, message_type, payload, status) VALUES ('adt-in', ?1, ?2, 'ADT^A01', ?3, 'routed') RETURNING id")
			q, _ := tx.PrepareContext(ctx, "INSERT INTO mf_queue (message_id, destination, lane, status, attempts, next_attempt_at, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)")
			for j := i; j < min(i+10_000, perDay); j++ {
				at := start + int64(d)*dayMS + int64(float64(j)*step)
				id++
				var mid int64
				if err := msg.QueryRowContext(ctx, at, fmt.Sprintf("C%d", id), hl7(rng, id, size)).Scan(&mid); err != nil {
					return err
				}
				patient := rng.IntN(5000)
				pending := d == days+churn-1 && perDay-j <= backlog
				for k, dest := range []string{"lab", "ehr"} {
					status, attempts, done := "done", 1, at+30
					if pending && k == 1 {
						status, attempts, done = "pending", 0, at
					}
					if _, err := q.ExecContext(ctx, mid, dest, fmt.Sprintf("%s/%d", dest, patient), status, attempts, at, done); err != nil {
						return err
					}
				}
			}
			msg.Close()
			q.Close()
			if err := tx.Commit(); err != nil {
				return err
			}
		}
		fmt.Printf("day %d written: %d of %d messages, %v\n", d, (d+1)*perDay, total, time.Since(began).Round(time.Second))
	}
	_, err = db.ExecContext(ctx, "PRAGMA journal_mode = WAL")
	return err
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func pragmaInt(ctx context.Context, db *sql.DB, name string) int64 {
	var n int64
	db.QueryRowContext(ctx, "PRAGMA "+name).Scan(&n)
	return n
}

func shape(ctx context.Context, db *sql.DB, path, when string) {
	pages, free, size := pragmaInt(ctx, db, "page_count"), pragmaInt(ctx, db, "freelist_count"), pragmaInt(ctx, db, "page_size")
	fmt.Printf("%s: file %s, -wal %s, pages %d, freelist %d (%s, %.1f%%)\n", when, mib(fileSize(path)), mib(fileSize(path+"-wal")),
		pages, free, mib(free*size), 100*float64(free)/float64(max(pages, 1)))
}

// timed runs f n times and prints the median and the slowest.
func timed(name string, n int, f func() error) error {
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	fmt.Printf("%-28s median %v, slowest %v (%d runs)\n", name, ds[len(ds)/2].Round(10*time.Microsecond), ds[len(ds)-1].Round(10*time.Microsecond), n)
	return nil
}

// plans prints the query plans of the statements that run all day.
func plans(ctx context.Context, db *sql.DB, when string) {
	stmts := map[string]string{
		"claim head (lane_head)":   "SELECT id FROM mf_queue WHERE lane = 'ehr/1' AND id > 0 AND status IN ('pending', 'inflight') ORDER BY id LIMIT 1",
		"purge queue":              "SELECT id FROM mf_queue WHERE status IN ('done', 'dead') AND updated_at < 1 ORDER BY updated_at LIMIT 10000",
		"purge walk":               "SELECT m.id FROM mf_messages m WHERE m.id > 1 ORDER BY m.id LIMIT 1000",
		"stats (pending/inflight)": "SELECT destination, status, count(*) FROM mf_queue WHERE status IN ('pending', 'inflight') GROUP BY destination, status",
		"stats (dead)":             "SELECT destination, count(*) FROM mf_queue WHERE status = 'dead' GROUP BY destination",
		"reclaim expired":          "SELECT id FROM mf_queue WHERE status = 'inflight' AND lease_expires_at < 1",
	}
	names := make([]string, 0, len(stmts))
	for n := range stmts {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Printf("query plans %s:\n", when)
	for _, n := range names {
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+stmts[n])
		if err != nil {
			fmt.Printf("  %s: %v\n", n, err)
			continue
		}
		var lines []string
		for rows.Next() {
			var a, b, c int
			var d string
			rows.Scan(&a, &b, &c, &d)
			lines = append(lines, d)
		}
		rows.Close()
		fmt.Printf("  %-26s %s\n", n, strings.Join(lines, " | "))
	}
}

// load ingests rate messages/s, each to one of 50 lanes, and delivers
// them (claim, complete) as an engine with its destinations up does; it
// records each ingest's latency (the ACK's wait on the store).
type load struct {
	s *sqlite.Store
	ackwait.Waits
	stop chan struct{}
	wg   sync.WaitGroup
}

func startLoad(s *sqlite.Store, rate, size int) *load {
	l := &load{s: s, stop: make(chan struct{})}
	lanes := make(chan string, 1024)
	ctx := context.Background()
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		var senders sync.WaitGroup
		defer close(lanes)
		defer senders.Wait()
		rng := rand.New(rand.NewPCG(3, 4))
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		var n int64
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			n++
			lane := fmt.Sprintf("live/%d", rng.IntN(50))
			msg := storage.NewMessage{
				Inbound: "adt-in", ControlID: fmt.Sprint(n), MessageType: "ADT^A01", Payload: hl7(rng, n, size),
				Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "live", Lane: lane}},
			}
			// Each message on its own goroutine, as on the senders' own
			// connections: a stalled store holds every sender, not just
			// the next tick.
			senders.Add(1)
			go func() {
				defer senders.Done()
				t := time.Now()
				_, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{msg}})
				d := time.Since(t)
				if err != nil {
					l.Fail(err)
					return
				}
				l.Add(d)
				select {
				case lanes <- lane:
				default:
				}
			}()
		}
	}()
	go func() {
		defer l.wg.Done()
		for lane := range lanes {
			c, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Lane: lane, Owner: "bench", LeaseTTL: time.Minute})
			if err != nil {
				continue
			}
			s.QueueComplete(ctx, storage.QueueCompleteParams{Claim: storage.Claim{ID: c.Row.ID, Owner: "bench", Attempt: c.Row.Attempts}})
		}
	}()
	return l
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
	l.PrintFailures()
}

func measure(path string, rate, size int, retention time.Duration, analyze bool) error {
	ctx := context.Background()
	t := time.Now()
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Printf("open: %v\n", time.Since(t).Round(time.Microsecond))
	db := s.DB()
	if err := timed("migrate (nothing to do)", 3, func() error { return s.Migrate(ctx) }); err != nil {
		return err
	}
	if err := timed("schema check", 3, func() error { return s.SchemaCheck(ctx) }); err != nil {
		return err
	}
	shape(ctx, db, path, "at start")
	var msgs, rows int64
	db.QueryRowContext(ctx, "SELECT (SELECT count(*) FROM mf_messages), (SELECT count(*) FROM mf_queue)").Scan(&msgs, &rows)
	fmt.Printf("rows: %d messages, %d queue rows\n", msgs, rows)
	if err := timed("QueueStats (/metrics)", 5, func() error { _, err := s.QueueStats(ctx); return err }); err != nil {
		return err
	}
	if err := timed("QueueLanes (/lanes)", 5, func() error { _, err := s.QueueLanes(ctx, storage.QueueLanesParams{}); return err }); err != nil {
		return err
	}
	plans(ctx, db, "(no statistics)")
	if analyze {
		t := time.Now()
		if _, err := db.ExecContext(ctx, "ANALYZE"); err != nil {
			return err
		}
		fmt.Printf("ANALYZE: %v\n", time.Since(t).Round(time.Millisecond))
		plans(ctx, db, "(after ANALYZE)")
		if err := timed("QueueStats after ANALYZE", 5, func() error { _, err := s.QueueStats(ctx); return err }); err != nil {
			return err
		}
	}

	l := startLoad(s, rate, size)
	time.Sleep(5 * time.Second)
	fmt.Printf("baseline 5 s at %d/s: %s; -wal %s\n", rate, l.Window(), mib(fileSize(path+"-wal")))

	// One purge batch at a time, as the sweeper runs them, beside the load.
	for i := 0; i < 3; i++ {
		t := time.Now()
		r, err := s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: retention})
		if err != nil {
			return err
		}
		took := time.Since(t)
		time.Sleep(3 * took) // the sweeper's purgePause
		fmt.Printf("purge batch %d: %d queue rows, %d messages in %v; load meanwhile: %s\n", i+1, r.QueueRows, r.Messages, took.Round(time.Millisecond), l.Window())
	}

	// mf backup's copy beside the load.
	dir, err := os.MkdirTemp(filepath.Dir(path), "sqliteage-backup-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var peak atomic.Int64
	done := make(chan struct{})
	go func() {
		for {
			if w := fileSize(path + "-wal"); w > peak.Load() {
				peak.Store(w)
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	l.Window()
	t = time.Now()
	sum, err := s.Backup(ctx, filepath.Join(dir, "copy.db"))
	took := time.Since(t)
	close(done)
	if err != nil {
		return err
	}
	fmt.Printf("backup: %v, copy %s (%d messages); load meanwhile: %s; -wal at most %s, %s at its end\n",
		took.Round(time.Millisecond), mib(fileSize(filepath.Join(dir, "copy.db"))), sum.Messages, l.Window(), mib(peak.Load()), mib(fileSize(path+"-wal")))
	for i := 0; i < 4; i++ {
		time.Sleep(2500 * time.Millisecond)
		fmt.Printf("%.1f s after the backup: -wal %s\n", 2.5*float64(i+1), mib(fileSize(path+"-wal")))
	}
	fmt.Printf("after: %s\n", l.Window())
	l.end()
	shape(ctx, db, path, "at the end")
	return nil
}

// purge runs the sweeper's batches (storage.DefaultPurgeLimit rows each)
// one after the other, with nothing else running, and times each.
func purge(path string, retention time.Duration, batches, limit int, backup bool) error {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
	if err != nil {
		return err
	}
	defer s.Close()
	var all time.Duration
	for i := 0; i < batches; i++ {
		t := time.Now()
		r, err := s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: retention, Limit: limit})
		if err != nil {
			return err
		}
		took := time.Since(t)
		all += took
		fmt.Printf("purge batch %d: %d queue rows, %d messages in %v\n", i+1, r.QueueRows, r.Messages, took.Round(time.Millisecond))
	}
	fmt.Printf("%d batches in %v\n", batches, all.Round(time.Millisecond))
	shape(ctx, s.DB(), path, "after")
	if !backup {
		return nil
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), "sqliteage-backup-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t := time.Now()
	if _, err := s.Backup(ctx, filepath.Join(dir, "copy.db")); err != nil {
		return err
	}
	fmt.Printf("backup: %v, copy %s\n", time.Since(t).Round(time.Millisecond), mib(fileSize(filepath.Join(dir, "copy.db"))))
	return nil
}

// Command pgage builds an aged PostgreSQL store fast and measures the
// retention purge on it: what the purge calls cost, and what they do to the
// ACK wait of the ingests that run beside them.
//
//	go run ./bench/pgage age -db NAME [-messages 6000000] [-days 28] [-retention-days 7] [-blocked-days 21] [-payload 500]
//	go run ./bench/pgage purge -db NAME [-retention-days 6] [-calls 20] [-limit 10000] [-rate 200] [-copy NAME]
//
// age creates database NAME (dropped first if it exists) and writes what a
// node leaves behind that ran -days with a purge at -retention-days and
// destination ehr blocked for the last -blocked-days: -messages arrived over
// the -days (each routed to lab, every second one to ehr too, lanes of 5,000
// patients); lab took each within 30 ms, ehr took them until it blocked: its
// lanes' heads are held (on_exhausted = "block") and every ehr row since is
// pending. What the purge had deleted is not written: the stored messages
// are those of the last -retention-days and the ehr messages since the
// block, whose rows are all still there (the blocked backlog past the
// cut-off). It is written with SQL in chunks, then vacuumed and analysed.
//
// purge works on a copy (-copy, made from NAME as a template and dropped at
// the end) unless -copy is empty: it runs the sweeper's purge calls one
// after the other with the sweeper's pause (three times the call's time)
// until one deletes less than -limit of both tables and says no More, or
// -calls were made,
// beside a load of -rate single-message ingests a second (each on its own
// goroutine, as senders on their own connections), and prints each call's
// time and rows and the ACK waits of the ingests meanwhile, after a
// baseline of 5 s without a purge.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/bench/internal/ackwait"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pgage age|purge -db NAME [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	server := fs.String("url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "the server (its database is used to create and drop others)")
	db := fs.String("db", "", "the aged store's database")
	messages := fs.Int("messages", 6_000_000, "age: messages that arrived over -days")
	days := fs.Int("days", 28, "age: days of traffic")
	keep := fs.Float64("retention-days", 7, "age: the retention the store ran with; purge: the retention to purge with")
	blocked := fs.Float64("blocked-days", 21, "age: days since ehr blocked")
	payload := fs.Int("payload", 500, "payload bytes a message")
	calls := fs.Int("calls", 20, "purge: most purge calls")
	limit := fs.Int("limit", storage.DefaultPurgeLimit, "purge: rows a call (the sweeper's)")
	rate := fs.Int("rate", 200, "purge: ingests a second beside it (0: none)")
	cp := fs.String("copy", "mf_pgpurge_copy", "purge: work on a copy of -db by this name, dropped at the end (empty: on -db itself)")
	fs.Parse(os.Args[2:])
	if *db == "" {
		fmt.Fprintln(os.Stderr, "pgage: -db is required")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "age":
		err = age(*server, *db, *messages, *days, *keep, *blocked, *payload)
	case "purge":
		err = purge(*server, *db, *cp, days2d(*keep), *calls, *limit, *rate, *payload)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgage:", err)
		os.Exit(1)
	}
}

func days2d(d float64) time.Duration { return time.Duration(d * 24 * float64(time.Hour)) }

// dbURL is server's URL with database name.
func dbURL(server, name string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func admin(ctx context.Context, server string, stmts ...string) error {
	c, err := pgx.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

func age(server, name string, messages, days int, keep, blocked float64, payload int) error {
	ctx := context.Background()
	if err := admin(ctx, server, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	u, err := dbURL(server, name)
	if err != nil {
		return err
	}
	s, err := postgres.Open(ctx, postgres.Options{URL: u})
	if err != nil {
		return err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return err
	}
	s.Close()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	began := time.Now()
	// Message i arrived at now - days + i*step; it is stored if it is
	// within the retention, or an ehr message (i even) since the block.
	// control_id carries i, for the queue rows' insert.
	const chunk = 250_000
	step := float64(days) * 86400 / float64(messages)
	for from := 1; from <= messages; from += chunk {
		to := min(from+chunk-1, messages)
		tag, err := c.Exec(ctx, `
INSERT INTO mf_messages (inbound, received_at, control_id, message_type, payload, status)
SELECT 'adt-in', t, 'C' || i, 'ADT^A01',
       convert_to(rpad('MSH|^~\&|ADT|HOSP|LAB|HOSP|20261127120000||ADT^A01|C' || i || '|P|2.5' || chr(13) ||
                       'PID|1||' || (i % 5000) || '^^^HOSP||DOE^JANE||19700101|F' || chr(13), $5::int, md5(i::text)), 'UTF8'),
       'routed'
  FROM (SELECT i, now() - make_interval(days => $3::int) + make_interval(secs => i * $4::float8) AS t
          FROM generate_series($1::bigint, $2::bigint) i) g
 WHERE t > now() - make_interval(secs => $6::float8)
    OR (i % 2 = 0 AND t > now() - make_interval(secs => $7::float8))
 ORDER BY i`, from, to, days, step, payload, keep*86400, blocked*86400)
		if err != nil {
			return fmt.Errorf("messages: %w", err)
		}
		fmt.Printf("messages %d..%d: %d stored, %v\n", from, to, tag.RowsAffected(), time.Since(began).Round(time.Second))
	}
	// One row per destination, in message order: lab's done within 30 ms
	// and kept only within the retention; ehr's done before the block,
	// pending since.
	tag, err := c.Exec(ctx, `
INSERT INTO mf_queue (message_id, destination, lane, status, attempts, next_attempt_at, created_at, updated_at)
SELECT m.id, d.dest, d.dest || '/' || (m.i % 5000), d.status, CASE d.status WHEN 'done' THEN 1 ELSE 0 END,
       m.received_at, m.received_at, m.received_at + CASE d.status WHEN 'done' THEN interval '30 ms' ELSE interval '0' END
  FROM (SELECT id, received_at, substr(control_id, 2)::bigint AS i FROM mf_messages) m
 CROSS JOIN LATERAL (
       SELECT 'lab' AS dest, 'done' AS status, 1 AS ord
        WHERE m.received_at > now() - make_interval(secs => $1::float8)
       UNION ALL
       SELECT 'ehr', CASE WHEN m.received_at > now() - make_interval(secs => $2::float8) THEN 'pending' ELSE 'done' END, 2
        WHERE m.i % 2 = 0) d
 ORDER BY m.id, d.ord`, keep*86400, blocked*86400)
	if err != nil {
		return fmt.Errorf("queue rows: %w", err)
	}
	fmt.Printf("queue rows: %d, %v\n", tag.RowsAffected(), time.Since(began).Round(time.Second))
	// Each blocked lane's head is held, as on_exhausted = "block" leaves it.
	tag, err = c.Exec(ctx, `
UPDATE mf_queue SET held = true, attempts = 5, last_error = 'connection refused'
 WHERE id IN (SELECT min(id) FROM mf_queue WHERE status = 'pending' GROUP BY lane)`)
	if err != nil {
		return fmt.Errorf("held heads: %w", err)
	}
	fmt.Printf("held lane heads: %d\n", tag.RowsAffected())
	// The routes' lane_key for both, so that a graph's start moves nothing.
	if _, err := c.Exec(ctx, `INSERT INTO mf_lane_keys (destination, lane_key) VALUES ('lab', 'PID-3.1'), ('ehr', 'PID-3.1')`); err != nil {
		return err
	}
	if _, err := c.Exec(ctx, "VACUUM (ANALYZE)"); err != nil {
		return err
	}
	return describe(ctx, c, days2d(keep), "aged")
}

// describe prints the store's rows, and those past a cut-off.
func describe(ctx context.Context, c interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, older time.Duration, when string) error {
	var msgs, old, rows, done, pending, blocked int64
	var size string
	err := c.QueryRow(ctx, `
SELECT (SELECT count(*) FROM mf_messages),
       (SELECT count(*) FROM mf_messages WHERE received_at < now() - make_interval(secs => $1)),
       (SELECT count(*) FROM mf_queue),
       (SELECT count(*) FROM mf_queue WHERE status IN ('done', 'dead') AND updated_at < now() - make_interval(secs => $1)),
       (SELECT count(*) FROM mf_queue WHERE status = 'pending'),
       (SELECT count(*) FROM mf_messages m WHERE received_at < now() - make_interval(secs => $1)
           AND EXISTS (SELECT 1 FROM mf_queue q WHERE q.message_id = m.id AND q.status = 'pending')),
       pg_size_pretty(pg_database_size(current_database()))`, storage.Seconds(older)).
		Scan(&msgs, &old, &rows, &done, &pending, &blocked, &size)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s; %d messages (%d past a cut-off of %v, %d of them blocked), %d queue rows (%d finished past it, %d pending)\n",
		when, size, msgs, old, older, blocked, rows, done, pending)
	return nil
}

// load ingests rate single-message batches a second, each on its own
// goroutine, and records each one's time: the ACK's wait on the store.
type load struct {
	ackwait.Waits
	stop chan struct{}
	wg   sync.WaitGroup
}

func startLoad(s *postgres.Store, rate, size int) *load {
	l := &load{stop: make(chan struct{})}
	if rate <= 0 {
		return l
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		var senders sync.WaitGroup
		defer senders.Wait()
		rng := rand.New(rand.NewPCG(3, 4))
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			b := make([]byte, size)
			for i := range b {
				b[i] = byte('A' + rng.IntN(26))
			}
			copy(b, "MSH|^~\\&|ADT|HOSP|LAB|HOSP|20261127120000||ADT^A01|L|P|2.5\r")
			msg := storage.NewMessage{
				Inbound: "adt-in", ControlID: fmt.Sprint("L", n), MessageType: "ADT^A01", Payload: b,
				Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "live", Lane: fmt.Sprintf("live/%d", rng.IntN(50))}},
			}
			senders.Add(1)
			go func() {
				defer senders.Done()
				t := time.Now()
				_, err := s.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: []storage.NewMessage{msg}})
				d := time.Since(t)
				if err != nil {
					l.Fail(err)
					return
				}
				l.Add(d)
			}()
		}
	}()
	return l
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
	l.PrintFailures()
}

func purge(server, name, cp string, older time.Duration, calls, limit, rate, size int) error {
	ctx := context.Background()
	if cp != "" {
		t := time.Now()
		if err := admin(ctx, server, "DROP DATABASE IF EXISTS "+pgx.Identifier{cp}.Sanitize(),
			"CREATE DATABASE "+pgx.Identifier{cp}.Sanitize()+" TEMPLATE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return err
		}
		fmt.Printf("copied %s to %s in %v\n", name, cp, time.Since(t).Round(time.Millisecond))
		defer func() {
			if err := admin(context.Background(), server, "DROP DATABASE IF EXISTS "+pgx.Identifier{cp}.Sanitize()); err != nil {
				fmt.Fprintln(os.Stderr, "pgage:", err)
			}
		}()
		name = cp
	}
	u, err := dbURL(server, name)
	if err != nil {
		return err
	}
	s, err := postgres.Open(ctx, postgres.Options{URL: u, PoolSize: 10})
	if err != nil {
		return err
	}
	defer s.Close()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if err := describe(ctx, c, older, "before"); err != nil {
		return err
	}
	l := startLoad(s, rate, size)
	if rate > 0 {
		time.Sleep(5 * time.Second)
		fmt.Printf("baseline 5 s at %d/s: %s\n", rate, l.Window())
	}
	var all, slowest time.Duration
	var total storage.PurgeResult
	for i := 1; i <= calls; i++ {
		t := time.Now()
		r, err := s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: older, Limit: limit})
		if err != nil {
			l.end()
			return err
		}
		took := time.Since(t)
		all += took
		slowest = max(slowest, took)
		total.QueueRows += r.QueueRows
		total.Messages += r.Messages
		more := ""
		if r.More {
			more = " (more to walk)"
		}
		fmt.Printf("call %d: %d queue rows, %d messages%s in %v; ingests meanwhile: %s\n", i, r.QueueRows, r.Messages, more, took.Round(time.Millisecond), l.Window())
		if r.QueueRows < int64(limit) && r.Messages < int64(limit) && !r.More {
			break
		}
		time.Sleep(3 * took) // the sweeper's purgePause
		l.Window()
	}
	l.end()
	fmt.Printf("purged %d queue rows, %d messages in %v of calls (slowest %v)\n", total.QueueRows, total.Messages, all.Round(time.Millisecond), slowest.Round(time.Millisecond))
	return describe(ctx, c, older, "after")
}

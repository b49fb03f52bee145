// Command relane measures how long a graph's start takes to lane a backlog
// again after a lane_key change (lanes.Relane), during which its lanes
// wait (its listeners accept and store messages): it fills a fresh schema (or
// SQLite file) with -rows unfinished rows of -patients patients (and -done
// finished ones before them), laned by PID-3.1, then lanes them by PID-3
// (every row moves), then once more with nothing to move (a read of every
// row), then with the laning recorded (nothing read). It prints one line
// per pass. With -ingest, one message at a time is stored meanwhile, laned
// by PID-3, as the graph's inbounds do during the move, and each pass also
// prints how many were stored and how long the slowest store took (an
// ACK waits for it).
//
//	go run ./bench/relane -url 'postgres://postgres@127.0.0.1:5432/mf_lk_test?sslmode=disable' -schema mf_lk_relane [-rows 100000] [-done 100000] [-patients 1000]
//	go run ./bench/relane -sqlite /tmp/relane.db
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/sqlite"
)

func main() {
	pgURL := flag.String("url", "", "PostgreSQL server URL (a database the schema is made in)")
	schema := flag.String("schema", "", "PostgreSQL schema to make, fill and drop (it must not exist)")
	sqlitePath := flag.String("sqlite", "", "SQLite file to make and fill instead (it must not exist)")
	rows := flag.Int("rows", 100000, "unfinished rows")
	done := flag.Int("done", 100000, "finished rows, stored before them")
	patients := flag.Int("patients", 1000, "patients (lanes)")
	flag.BoolVar(&keep, "keep", false, "keep the PostgreSQL schema (to look at its plans); drop it yourself")
	flag.BoolVar(&ingest, "ingest", false, "store one message at a time during each pass, and report how long each store took")
	flag.Parse()
	if err := run(*pgURL, *schema, *sqlitePath, *rows, *done, *patients); err != nil {
		fmt.Fprintln(os.Stderr, "relane:", err)
		os.Exit(1)
	}
}

var keep, ingest bool

// storing stores one message at a time, laned by router, from id on, until
// stop is called, which returns how many it stored and the slowest store.
func storing(ctx context.Context, st storage.Store, router *lanes.Router, id, patients int) (stop func() (int, time.Duration, error)) {
	quit, ended := make(chan struct{}), make(chan struct{})
	var n int
	var slowest time.Duration
	var failed error
	go func() {
		defer close(ended)
		for ; ; id++ {
			select {
			case <-quit:
				return
			default:
			}
			p := adt(id, id%patients)
			m, _ := hl7.Parse(p)
			msg := storage.NewMessage{Inbound: "adt_in", ControlID: fmt.Sprint(id), MessageType: "ADT^A01",
				Payload: p, Status: storage.MessageRouted, Deliveries: router.Route("adt_in", m)}
			start := time.Now()
			if _, err := st.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{msg}}); err != nil {
				failed = err
				return
			}
			n, slowest = n+1, max(slowest, time.Since(start))
		}
	}()
	return func() (int, time.Duration, error) {
		close(quit)
		<-ended
		return n, slowest, failed
	}
}

func run(pgURL, schema, sqlitePath string, rows, done, patients int) error {
	ctx := context.Background()
	var st storage.Store
	var finish func(n int) error
	switch {
	case pgURL != "" && schema != "":
		conn, err := pgx.Connect(ctx, pgURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
		if !keep {
			defer conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}
		u, err := url.Parse(pgURL)
		if err != nil {
			return err
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		pg, err := postgres.Open(ctx, postgres.Options{URL: u.String(), PoolSize: 4})
		if err != nil {
			return err
		}
		defer pg.Close()
		st = pg
		finish = func(n int) error {
			_, err := pg.Pool().Exec(ctx, "UPDATE mf_queue SET status = 'done' WHERE id <= $1", n)
			if err == nil {
				_, err = pg.Pool().Exec(ctx, "VACUUM ANALYZE mf_queue")
			}
			return err
		}
	case sqlitePath != "":
		sq, err := sqlite.Open(ctx, sqlite.Options{Path: sqlitePath})
		if err != nil {
			return err
		}
		defer sq.Close()
		st = sq
		finish = func(n int) error {
			_, err := sq.DB().ExecContext(ctx, "UPDATE mf_queue SET status = 'done' WHERE id <= ?", n)
			return err
		}
	default:
		return fmt.Errorf("give -url and -schema, or -sqlite")
	}
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	before, after := cfg("PID-3.1"), cfg("PID-3")
	beforeRouter, err := lanes.NewRouter(before)
	if err != nil {
		return err
	}
	afterRouter, err := lanes.NewRouter(after)
	if err != nil {
		return err
	}
	start := time.Now()
	total := done + rows
	for i := 0; i < total; {
		batch := make([]storage.NewMessage, 0, 500)
		for ; len(batch) < 500 && i < total; i++ {
			p := adt(i, i%patients)
			m, _ := hl7.Parse(p)
			batch = append(batch, storage.NewMessage{Inbound: "adt_in", ControlID: fmt.Sprint(i), MessageType: "ADT^A01",
				Payload: p, Status: storage.MessageRouted, Deliveries: beforeRouter.Route("adt_in", m)})
		}
		if _, err := st.MessageIngest(ctx, storage.MessageIngestParams{Messages: batch}); err != nil {
			return err
		}
	}
	if err := finish(done); err != nil {
		return err
	}
	fmt.Printf("store %s: %d unfinished rows of %d patients, %d finished before them; filled in %v\n",
		st.Dialect(), rows, patients, done, time.Since(start).Round(time.Millisecond))
	// The rows' laning as mf records it at a graph's start.
	if err := lanes.Relane(ctx, st, storage.Fence{}, before, beforeRouter, nil); err != nil {
		return err
	}
	for _, pass := range []string{"PID-3.1 -> PID-3 (every row moves)", "again, another laning recorded (nothing moves: all read)", "again, recorded (nothing read)"} {
		if strings.HasPrefix(pass, "again, another") {
			if err := st.QueueLaneKeyRecord(ctx, storage.QueueLaneKeyRecordParams{Destination: "emr", LaneKey: "in=unknown"}); err != nil {
				return err
			}
		}
		var stop func() (int, time.Duration, error)
		if ingest {
			stop = storing(ctx, st, afterRouter, total, patients)
		}
		start := time.Now()
		var res []lanes.Relaned
		if err := lanes.Relane(ctx, st, storage.Fence{}, after, afterRouter, func(r lanes.Relaned) { res = append(res, r) }); err != nil {
			return err
		}
		took := time.Since(start)
		if stop != nil {
			n, slowest, err := stop()
			if err != nil {
				return err
			}
			total += n
			fmt.Printf("  stored meanwhile, one at a time: %d messages, the slowest in %v\n", n, slowest.Round(time.Millisecond))
		}
		var moved, read int64
		lanesAfter := 0
		for _, r := range res {
			moved, read, lanesAfter = moved+r.Moved, read+r.Rows, r.Lanes
		}
		rate := 0.0
		if read > 0 {
			rate = float64(read) / took.Seconds()
		}
		fmt.Printf("%-58s rows read %7d  moved %7d  lanes %5d  took %v (%.0f rows/s)\n", pass, read, moved, lanesAfter,
			took.Round(time.Millisecond), rate)
	}
	return nil
}

func cfg(laneKey string) *config.Config {
	c, err := config.Parse([]byte(fmt.Sprintf(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:20999"

[[outbound]]
name = "emr"
type = "file"
directory = "out"

[[route]]
from = "adt_in"
to = ["emr"]
lane_key = %q
`, laneKey)), "relane.toml")
	if err != nil {
		panic(err)
	}
	return c
}

// adt is an ADT^A01 of about 600 bytes, as bench/run sends.
func adt(id, patient int) []byte {
	return []byte(fmt.Sprintf("MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01^ADT_A01|%d|P|2.5.1\r"+
		"EVN|A01|20261121090000\r"+
		"PID|1||P%06d^^^HOSP^MR||DOE^JANE^Q^^^^L||19800101|F|||123 MAIN ST^^SPRINGFIELD^IL^62701^USA^H||(217)555-0100^PRN^PH|||S||ACCT%08d|123-45-6789\r"+
		"PV1|1|I|3W^301^A^HOSP^^^^3W||||1234^SMITH^JOHN^A^^^MD|5678^JONES^MARY^B^^^MD||MED||||1|||1234^SMITH^JOHN^A^^^MD|IN||||||||||||||||||||||||||20261121090000\r"+
		"AL1|1|DA|PCN^PENICILLIN^L|SV|HIVES\r", id, patient, id))
}

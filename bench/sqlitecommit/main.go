// Command sqlitecommit measures the machine's reference for the embedded
// store: single-row INSERT transactions per second on SQLite with the
// settings mf uses (WAL, synchronous=FULL, BEGIN IMMEDIATE), each committed
// on its own. mf's group commit is compared with it (bench/run).
//
//	go run ./bench/sqlitecommit [-dir DIR] [-duration 10s] [-writers 1] [-size 500]
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite"
)

func main() {
	dir := flag.String("dir", "", "directory for the database file (default: a temporary one, removed after)")
	duration := flag.Duration("duration", 10*time.Second, "how long to measure")
	writers := flag.Int("writers", 1, "concurrent writers (SQLite has one writer at a time: they take turns)")
	size := flag.Int("size", 500, "payload bytes per row")
	flag.Parse()
	if err := run(*dir, *duration, *writers, *size); err != nil {
		fmt.Fprintln(os.Stderr, "sqlitecommit:", err)
		os.Exit(1)
	}
}

func run(dir string, duration time.Duration, writers, size int) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "sqlitecommit-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "commit.db")+"?"+q.Encode())
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(writers)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)"); err != nil {
		return err
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	var commits atomic.Int64
	var firstErr error
	var once sync.Once
	deadline := time.Now().Add(duration)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				tx, err := db.BeginTx(ctx, nil)
				if err == nil {
					if _, err = tx.ExecContext(ctx, "INSERT INTO t (payload) VALUES (?)", payload); err == nil {
						err = tx.Commit()
					} else {
						tx.Rollback()
					}
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				commits.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	elapsed := time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"writers": writers, "commits": commits.Load(), "elapsed_seconds": elapsed,
		"commits_per_second": float64(commits.Load()) / elapsed,
	})
}

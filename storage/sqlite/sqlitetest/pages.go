// Package sqlitetest holds what tests of a SQLite store share: a disk made
// full on demand.
package sqlitetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"
)

// LimitPages makes db's file as full as a disk with room for extra more
// pages of it: beyond them every write fails with SQLITE_FULL, as it does
// when the disk has no space left. A large extra gives the space back. The
// limit (max_page_count) is each connection's own, so it holds all the
// pool's connections at once to set every one. The store's writer may need
// one more connection inside its transaction (to prepare a statement it has
// not used yet): when LimitPages cannot have them all within a second, it
// lets go of those it holds, so that the writer can finish, and tries again.
func LimitPages(t testing.TB, db *sql.DB, extra int64) {
	t.Helper()
	for try := 1; ; try++ {
		err := limitAll(db, extra)
		if err == nil {
			return
		}
		if !errors.Is(err, context.DeadlineExceeded) || try == 30 {
			t.Fatalf("limit the pages of every connection (try %d): %v", try, err)
		}
	}
}

// limitAll is one try of LimitPages: every connection held at once, each
// taken within a second.
func limitAll(db *sql.DB, extra int64) error {
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range db.Stats().MaxOpenConnections {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := db.Conn(ctx)
		cancel()
		if err != nil {
			return err
		}
		conns = append(conns, c)
		var pages, set int64
		if err := c.QueryRowContext(context.Background(), "PRAGMA page_count").Scan(&pages); err != nil {
			return err
		}
		if err := c.QueryRowContext(context.Background(), fmt.Sprintf("PRAGMA max_page_count = %d", pages+extra)).Scan(&set); err != nil {
			return err
		}
		if set != pages+extra {
			return fmt.Errorf("max_page_count %d, want %d", set, pages+extra)
		}
	}
	return nil
}

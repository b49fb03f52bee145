// Package sqlitetest holds what tests of a SQLite store share: a disk made
// full on demand.
package sqlitetest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
)

// LimitPages makes db's file as full as a disk with room for extra more
// pages of it: beyond them every write fails with SQLITE_FULL, as it does
// when the disk has no space left. A large extra gives the space back. The
// limit (max_page_count) is each connection's own, so it holds all the
// pool's connections at once to set every one.
func LimitPages(t testing.TB, db *sql.DB, extra int64) {
	t.Helper()
	ctx := context.Background()
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range db.Stats().MaxOpenConnections {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var pages, set int64
		if err := c.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages+extra)).Scan(&set); err != nil {
			t.Fatal(err)
		}
		if set != pages+extra {
			t.Fatalf("max_page_count %d, want %d", set, pages+extra)
		}
	}
}

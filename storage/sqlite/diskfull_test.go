package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/messagefoundry/mf/storage"
)

// codedError stands for a modernc.org/sqlite error of an extended result
// code, which nothing outside the driver can make.
type codedError int

func (c codedError) Error() string { return fmt.Sprintf("disk I/O error (%d)", int(c)) }
func (c codedError) Code() int     { return int(c) }

// SQLite reports ENOSPC as SQLITE_FULL only for the pages it writes: when
// growing the -shm file (at open, and by the first reader of a new WAL), a
// size hint or an fsync meet the full disk, it says "disk I/O error
// (4874)". On a file system with (almost) no space left that is the full
// disk, and the operator must hear where to free space; the same I/O error
// with space to spare, or a read's, is not.
func TestAnIOErrorOnAFullFileSystemIsDiskFull(t *testing.T) {
	s := &Store{path: "/var/lib/mf/mf.db"}
	free := uint64(0)
	var asked string
	stubFreeSpace(t, func(dir string) (uint64, bool) { asked = dir; return free, true })
	for _, code := range []int{sqlite3.SQLITE_IOERR_SHMSIZE, sqlite3.SQLITE_IOERR_WRITE, sqlite3.SQLITE_IOERR_FSYNC, sqlite3.SQLITE_IOERR_TRUNCATE} {
		err := s.full(fmt.Errorf("sqlite: open %s: %w", s.path, codedError(code)))
		if !errors.Is(err, storage.ErrFull) || !strings.Contains(err.Error(), "free disk space on the file system of /var/lib/mf/mf.db") ||
			!strings.Contains(err.Error(), fmt.Sprintf("(%d)", code)) {
			t.Errorf("SQLite I/O error %d with 0 bytes free: %v; want storage.ErrFull saying to free disk space on the file system of /var/lib/mf/mf.db, and SQLite's own error", code, err)
		}
		if asked != "/var/lib/mf" {
			t.Errorf("free space asked of %q, want the database's directory /var/lib/mf", asked)
		}
	}
	if err := s.full(codedError(sqlite3.SQLITE_IOERR_READ)); errors.Is(err, storage.ErrFull) {
		t.Errorf("a read's I/O error on a full disk: %v; a read needs no space, it is not the full disk", err)
	}
	free = 1 << 30
	if err := s.full(codedError(sqlite3.SQLITE_IOERR_SHMSIZE)); errors.Is(err, storage.ErrFull) {
		t.Errorf("an I/O error with 1 GiB free: %v; want it as it is, not storage.ErrFull", err)
	}
}

// A write that finds the store read-only (SQLITE_READONLY and its extended
// codes) fails with storage.ErrReadOnly, and Ping says so until a write is
// committed again.
func TestAReadOnlyWriteMakesPingFailUntilAWriteCommits(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	for _, code := range []int{sqlite3.SQLITE_READONLY, sqlite3.SQLITE_READONLY_DBMOVED} {
		err := s.write(ctx, func(tx *sql.Tx) error { return codedError(code) })
		if !errors.Is(err, storage.ErrReadOnly) {
			t.Fatalf("a write failing with SQLite code %d: %v; want storage.ErrReadOnly", code, err)
		}
		if err := s.Ping(ctx); !errors.Is(err, storage.ErrReadOnly) {
			t.Fatalf("ping after a write found the store read-only: %v; want storage.ErrReadOnly", err)
		}
		if err := s.write(ctx, func(tx *sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("ping once a write was committed again: %v; want nil", err)
		}
	}
}

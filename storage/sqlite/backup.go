package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"database/sql"
)

// BackupSummary is what a backup holds, read back from the copy.
type BackupSummary struct {
	// Messages is the number of stored messages; Unfinished the queue rows
	// still to deliver (pending or in flight).
	Messages, Unfinished int64
	// LastMessageID and LastQueueID are the last ids the store gave out: an
	// engine started on the copy counts on from them.
	LastMessageID, LastQueueID int64
}

// Backup writes a consistent copy of the database, as of one commit, to
// dest, a file that must not exist, with mode 0600 (it holds every message:
// PHI), and reads back what it holds. The engine may run on the store
// meanwhile: the copy is read in one read transaction, which holds back no
// writer (the WAL only grows until it ends). The copy is a database on its
// own, with no -wal file to go with it: mf run starts on it as it is.
//
// Copying the database file alone while the engine runs is no backup: the
// commits since the last checkpoint are only in its -wal file, and a
// checkpoint writing pages during the copy leaves a file whose indexes and
// tables disagree.
func (s *Store) Backup(ctx context.Context, dest string) (BackupSummary, error) {
	if _, err := os.Lstat(dest); err == nil {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: %s already exists: mf leaves it as it is; name a new file (a date in its name, say), or remove the old one first", dest)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: %w", err)
	}
	// Written under a temporary name and renamed once synced, so that dest
	// is either the whole copy or not there: VACUUM INTO neither syncs what
	// it writes nor removes a half-written file when it fails.
	f, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*.tmp") // mode 0600
	if err != nil {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: %w", err)
	}
	tmp := f.Name()
	f.Close()
	done := false
	defer func() {
		if !done {
			os.Remove(tmp)
		}
	}()
	if _, err := s.db.ExecContext(ctx, queries.Get("backup"), tmp); err != nil {
		return BackupSummary{}, fmt.Errorf("sqlite: backup of %s: %w", s.path, s.full(err))
	}
	sum, err := readBackup(ctx, tmp)
	if err != nil {
		return BackupSummary{}, err
	}
	if err := syncFile(tmp); err != nil {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: syncing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: %w", err)
	}
	done = true
	if err := syncDir(filepath.Dir(dest)); err != nil {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: syncing the directory of %s: %w", dest, err)
	}
	return sum, nil
}

// readBackup checks the copy at path (SQLite's quick_check) and reads what
// it holds.
func readBackup(ctx context.Context, path string) (BackupSummary, error) {
	escaped := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	// immutable: nothing else has the file yet, and a read-only handle
	// then needs no -shm beside it.
	db, err := sql.Open("sqlite", "file:"+escaped+"?mode=ro&immutable=1")
	if err != nil {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: reading the copy: %w", err)
	}
	defer db.Close()
	var check string
	var sum BackupSummary
	err = db.QueryRowContext(ctx, queries.Get("backup_summary")).Scan(&check, &sum.Messages, &sum.Unfinished, &sum.LastMessageID, &sum.LastQueueID)
	if err != nil {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: reading the copy: %w", err)
	}
	if check != "ok" {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: the copy fails SQLite's quick_check (%s): the store itself may be damaged; run PRAGMA integrity_check on it", check)
	}
	return sum, nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// syncDir makes the rename durable. Windows cannot sync a directory (and
// does not need to); a file system that cannot either (EINVAL) has the
// file in place all the same.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

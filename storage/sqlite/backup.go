package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
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
			// VACUUM INTO writes through a rollback journal beside the
			// file, which a failed one (a full disk) leaves there.
			os.Remove(tmp + "-journal")
			os.Remove(tmp)
		}
	}()
	if _, err := s.db.ExecContext(ctx, queries.Get("backup"), tmp); err != nil {
		// Not s.full: a full disk here is most likely dest's, not the
		// store's, and SQLite's own words say it is full.
		return BackupSummary{}, fmt.Errorf("sqlite: backup of %s to %s: %w", s.path, dest, err)
	}
	sum, err := readBackup(ctx, tmp)
	if err != nil {
		return BackupSummary{}, err
	}
	if err := syncFile(tmp); err != nil {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: syncing %s: %w", tmp, err)
	}
	if err := placeNew(tmp, dest); err != nil {
		return BackupSummary{}, err
	}
	done = true
	if err := syncDir(filepath.Dir(dest)); err != nil {
		return BackupSummary{}, fmt.Errorf("sqlite: backup: syncing the directory of %s: %w", dest, err)
	}
	return sum, nil
}

// placeNew gives the file tmp the name dest, which must not exist, and
// removes the name tmp. A rename replaces a file dest that came meanwhile
// (another backup to the same name, its copy done first); a hard link
// does not. A file system without hard links (FAT, some network shares)
// has the rename, dest looked for just before.
func placeNew(tmp, dest string) error {
	err := os.Link(tmp, dest)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sqlite: backup: %s already exists (made while this backup ran): mf leaves it as it is; name a new file", dest)
	}
	if err != nil {
		if _, err := os.Lstat(dest); err == nil {
			return fmt.Errorf("sqlite: backup: %s already exists (made while this backup ran): mf leaves it as it is; name a new file", dest)
		}
		if err := os.Rename(tmp, dest); err != nil {
			return fmt.Errorf("sqlite: backup: %w", err)
		}
		return nil
	}
	if err := os.Remove(tmp); err != nil {
		return fmt.Errorf("sqlite: backup: the copy is in %s, but its temporary name %s could not be removed: %w", dest, tmp, err)
	}
	return nil
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

// Restored is what Restore did.
type Restored struct {
	BackupSummary
	// Aside are the files of the replaced store, as they were moved
	// (database file first, then its -wal and -shm if there were any).
	Aside []string
}

// Restore puts a copy of the backup at from in place of the store at path,
// and moves the store it replaces aside, whole: path, path-wal and
// path-shm become path.before-restore-STAMP, and the same with -wal and
// -shm, which SQLite opens together again. A backup put in place of the
// database file alone, beside the -wal a crash left, is read with that log
// applied to it, which belongs to another file: a damaged store. It takes
// the lock mf run takes, so it fails while an engine runs on the store,
// and checks the backup (SQLite's quick_check, mf's tables) before it
// changes anything. stamp names the files set aside.
func Restore(ctx context.Context, path, from, stamp string) (Restored, error) {
	if realPath(from) == realPath(path) {
		return Restored{}, fmt.Errorf("sqlite: restore: %s is the store itself", from)
	}
	if fi, err := os.Stat(from); err != nil {
		return Restored{}, fmt.Errorf("sqlite: restore: %w", err)
	} else if !fi.Mode().IsRegular() {
		return Restored{}, fmt.Errorf("sqlite: restore: %s is not a file", from)
	}
	// A -wal beside it holds commits the file alone lacks: that is a store
	// (or a snapshot of one), not a backup.
	if _, err := os.Stat(from + "-wal"); err == nil {
		return Restored{}, fmt.Errorf("sqlite: restore: %s has a -wal file beside it, so it is a store, not a backup (the file alone lacks what its -wal holds): make a backup of it with mf backup, or run mf on it where it is", from)
	}
	lock, err := lockFile(path)
	if err != nil {
		return Restored{}, err
	}
	defer lock.release()
	sum, err := readBackup(ctx, from)
	if err != nil {
		return Restored{}, fmt.Errorf("sqlite: restore: %s is not a backup of an mf store: %w", from, err)
	}
	tmp, err := copyPrivate(from, filepath.Dir(realPath(path)), filepath.Base(path))
	if err != nil {
		return Restored{}, fmt.Errorf("sqlite: restore: copying %s: %w", from, err)
	}
	done := false
	defer func() {
		if !done {
			os.Remove(tmp)
		}
	}()
	r := Restored{BackupSummary: sum}
	target := realPath(path)
	aside := target + ".before-restore-" + stamp
	// A rename replaces a file of the new name: one set aside by an
	// earlier restore of the same stamp would be lost.
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if _, err := os.Lstat(aside + suffix); err == nil {
			return Restored{}, fmt.Errorf("sqlite: restore: %s already exists (an earlier restore's): nothing was changed; try again in a second", aside+suffix)
		}
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if _, err := os.Lstat(target + suffix); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.Rename(target+suffix, aside+suffix); err != nil {
			return r, fmt.Errorf("sqlite: restore: moving the store aside (moved so far: %v): %w", r.Aside, err)
		}
		r.Aside = append(r.Aside, aside+suffix)
	}
	if err := os.Rename(tmp, target); err != nil {
		return r, fmt.Errorf("sqlite: restore: the store was moved aside (%v), but the backup could not be put in its place: %w", r.Aside, err)
	}
	done = true
	if err := syncDir(filepath.Dir(target)); err != nil {
		return r, fmt.Errorf("sqlite: restore: syncing the directory of %s: %w", target, err)
	}
	return r, nil
}

// copyPrivate copies from into a new file of mode 0600 in dir, synced, and
// returns its name.
func copyPrivate(from, dir, base string) (string, error) {
	src, err := os.Open(from)
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(dst, src)
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst.Name())
		return "", err
	}
	return dst.Name(), nil
}

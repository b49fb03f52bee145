package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// processLock is an exclusive lock on PATH.lock (flock, or LockFileEx on
// Windows), held while a process runs the engine on PATH. SQLite is
// single-node: two engines on one file would each deliver its lanes, and
// each would take the other's in-flight rows for a crashed predecessor's.
// The kernel drops the lock when the process dies, however it dies, so a
// kill -9 never leaves it behind.
type processLock struct{ f *os.File }

func lockFile(path string) (*processLock, error) {
	// The lock belongs to the file, not to the path that names it: an
	// engine reaching it through a symbolic link (a second config naming
	// /var/lib/mf/mf.db, a link to /data/mf.db) locked another PATH.lock
	// and ran beside the first. SQLite follows the link too: its -wal and
	// -shm are beside the file itself.
	name := realPath(path) + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sqlite: the directory %s of the store does not exist (mf creates the file, not its directory): create it, or correct store.path: %w", filepath.Dir(name), err)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: open lock file %s: %w", name, err)
	}
	if err := lockExclusive(f); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		holder := strings.TrimSpace(string(b[:n]))
		if _, perr := strconv.Atoi(holder); perr != nil {
			holder = "unknown"
		}
		return nil, fmt.Errorf("sqlite: %s is in use by another mf process (pid %s): SQLite is single-node; stop that process, or use a PostgreSQL or SQL Server store for more than one node", path, holder)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &processLock{f: f}, nil
}

func (l *processLock) release() {
	if l != nil {
		l.f.Close() // closing the file releases the lock
	}
}

// realPath is path with its symbolic links followed, to the file SQLite
// opens through it. A link made before the file (/var/lib/mf/mf.db to
// /data/mf/mf.db, not there yet) is followed too, where EvalSymlinks gives
// up on it, so the file is created, and locked, where later starts find it.
func realPath(path string) string {
	p := path
	for range 40 { // the kernel's own limit on links in a row
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return real
		}
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return p
		}
		target, err := os.Readlink(p)
		if err != nil {
			return p
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	return p
}

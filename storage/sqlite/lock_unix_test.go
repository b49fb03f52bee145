//go:build unix

package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/storage/sqlite"
)

// A second engine that reaches the database through a symbolic link, to
// the file or to a directory above it, is refused as in use: the lock was
// PATH.lock of the path as written, so each path had a lock of its own and
// two engines ran on one file, each taking the other's deliveries in hand
// for a crashed predecessor's and sending them again.
func TestExclusiveRefusesASecondEngineThroughASymlink(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	real := filepath.Join(root, "data")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(real, "mf.db")
	first, err := sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()

	fileLink, dirLink := filepath.Join(root, "link.db"), filepath.Join(root, "var-lib-mf")
	if err := os.Symlink(path, fileLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, dirLink); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{fileLink, filepath.Join(dirLink, "mf.db")} {
		s, err := sqlite.Open(ctx, sqlite.Options{Path: other, Exclusive: true})
		if err == nil {
			s.Close()
			t.Errorf("a second engine on %s, a link to %s that an engine runs on, opened it; want it refused as in use", other, path)
			continue
		}
		if !strings.Contains(err.Error(), "in use by another mf process") {
			t.Errorf("a second engine on %s, a link to %s: %v; want it refused as in use", other, path, err)
		}
	}
}

// A store path that is a symbolic link made before the store's first start
// (/var/lib/mf/mf.db to /data/mf/mf.db, not there yet) gets the new file
// readable by its owner only, as a plain path does, and the lock beside
// the file it leads to. SQLite made the file through the link with its own
// 0644 less the umask, world-readable with no WARN, since the private
// create (O_EXCL) found the link and took it for an existing file; and the
// lock was PATH.lock of the link, another than later starts take.
func TestANewDatabaseThroughADanglingSymlinkIsPrivate(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "data", "mf.db")
	if err := os.Mkdir(filepath.Dir(real), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "mf.db")
	if err := os.Symlink(filepath.Join("data", "mf.db"), link); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), sqlite.Options{Path: link, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{real, real + "-wal", real + "-shm", real + ".lock"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v: group or others may read it", name, perm)
		}
	}
	if _, err := os.Lstat(link + ".lock"); err == nil {
		t.Errorf("a lock file beside the link, %s: want it beside the file the link leads to only", link+".lock")
	}
}

// A database file with a second name (a hard link) is refused to the
// engine, by either name: SQLite names its -wal and -shm files after the
// path it opened, so two engines, one through each name, each had a lock
// and a write-ahead log of their own on one file, and ran side by side
// (each delivering every lane) while the file went corrupt.
func TestExclusiveRefusesAHardLinkedDatabase(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path, other := filepath.Join(dir, "mf.db"), filepath.Join(dir, "copy.db")
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Link(path, other); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, other} {
		s, err := sqlite.Open(ctx, sqlite.Options{Path: p, Exclusive: true})
		if err == nil {
			s.Close()
			t.Fatalf("open %s with a second hard link to it: <nil>, want it refused", filepath.Base(p))
		}
		if !strings.Contains(err.Error(), "2 names") || !strings.Contains(err.Error(), "find") {
			t.Errorf("open %s: %v; want it to say the file has 2 names and how to find them", filepath.Base(p), err)
		}
	}
	// Once the other name is gone, the engine runs on it again.
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
	if err != nil {
		t.Fatalf("open after the link was removed: %v", err)
	}
	s.Close()
}

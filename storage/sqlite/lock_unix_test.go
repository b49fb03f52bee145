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

package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/messagefoundry/mf/storage/sqlite"
)

// fsImmutable is FS_IMMUTABLE_FL (chattr +i), which golang.org/x/sys does
// not name.
const fsImmutable = 0x10

// makeUnwritable makes the file at path one this process cannot open for
// writing: mode 0400 for an ordinary user; for root, whom modes do not
// stop, the immutable attribute (taken off again at cleanup, so that the
// temporary directory can be removed).
func makeUnwritable(t *testing.T, path string) {
	t.Helper()
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		return
	}
	setFlags := func(set bool) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
		if err != nil {
			return err
		}
		if set {
			flags |= fsImmutable
		} else {
			flags &^= fsImmutable
		}
		return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, flags)
	}
	if err := setFlags(true); err != nil {
		t.Fatalf("making %s immutable (chattr +i) to keep root from writing it: %v", path, err)
	}
	t.Cleanup(func() {
		if err := setFlags(false); err != nil {
			t.Errorf("chattr -i %s: %v", path, err)
		}
	})
}

// A database file mf cannot write (another user's, a read-only mount, a
// read-only mode) is refused at open, naming the file and what to do.
// SQLite opened it read-only without a word: mf run started, bound its
// ports, said it was processing messages, and answered every message AE.
func TestADatabaseFileThatCannotBeWrittenIsRefusedAtOpen(t *testing.T) {
	for _, file := range []string{"mf.db", "mf.db-wal"} {
		t.Run(file, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "mf.db")
			s, err := sqlite.Open(ctx, sqlite.Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			s.Close()
			unwritable := filepath.Join(filepath.Dir(path), file)
			if file == "mf.db-wal" {
				// What a crash of a process of another user leaves.
				if err := os.WriteFile(unwritable, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			makeUnwritable(t, unwritable)

			s, err = sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
			if err == nil {
				s.Close()
				t.Fatalf("open with %s that this process cannot write succeeded; want it refused, naming it", unwritable)
			}
			if !strings.Contains(err.Error(), unwritable+" cannot be written") {
				t.Fatalf("open with %s that this process cannot write: %v; want an error naming it and saying it cannot be written", unwritable, err)
			}
		})
	}
}

package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// smallTmpfs mounts a small tmpfs in a temporary directory and returns the
// directory; the mount goes at cleanup. Where this process may not mount
// (not root, or in a container without CAP_SYS_ADMIN) it skips, but fails
// with CI set: a CI run must not pass without the disk-full tests.
func smallTmpfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("mounting a tmpfs to fill: %v (CI=true: run the tests as root, or with CAP_SYS_ADMIN, as .ci/run does on its machine)", err)
		}
		t.Skipf("mounting a tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// fill writes a file in dir until its file system is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// An engine started on a full disk was refused with "sqlite: open
// /…/mf.db: disk I/O error (4874)" (its store existed: SQLite could not
// grow the -shm file, and said so as an I/O error, which sends an operator
// to check the disk's health) or "database or disk is full (13)" (a new
// store), neither saying which disk. It now says the disk is full and
// where to free space.
func TestOpeningOnAFullDiskSaysTheDiskIsFull(t *testing.T) {
	ctx := context.Background()
	for _, existing := range []bool{true, false} {
		t.Run(map[bool]string{true: "existing store", false: "new store"}[existing], func(t *testing.T) {
			dir := smallTmpfs(t)
			path := filepath.Join(dir, "mf.db")
			if existing {
				s, err := sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			fill(t, dir)
			s, err := sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
			if err == nil {
				err = s.Migrate(ctx)
				s.Close()
			}
			if !errors.Is(err, storage.ErrFull) || !strings.Contains(err.Error(), "free disk space on the file system of "+path) {
				t.Fatalf("open and migrate on a full disk: %v; want storage.ErrFull, saying to free disk space on the file system of %s", err, path)
			}
		})
	}
}

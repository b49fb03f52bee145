package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// ext4 mounts a small ext4 file system, on a loop device, in a temporary
// directory with errors=remount-ro, and returns the directory and a
// function that makes the kernel remount it read-only there and then, as
// it does on an I/O error (ext4's trigger_fs_error). The mount goes at
// cleanup. Where it cannot (not root; no loop device or mkfs.ext4, as in
// many containers) it skips, or fails with CI set, as smallTmpfs does.
func ext4(t *testing.T) (dir string, remountReadOnly func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		cannotMount(t, "mounting a file system to make read-only needs root")
	}
	img := filepath.Join(t.TempDir(), "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		cannotMount(t, "mkfs.ext4: %v %s", err, out)
	}
	dir = t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop,errors=remount-ro", img, dir).CombinedOutput(); err != nil {
		cannotMount(t, "mounting an ext4 image on a loop device: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	dev, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		cannotMount(t, "the loop device of %s: %v", dir, err)
	}
	trigger := filepath.Join("/sys/fs/ext4", filepath.Base(dev), "trigger_fs_error")
	if _, err := os.Stat(trigger); err != nil {
		cannotMount(t, "ext4's trigger_fs_error: %v", err)
	}
	return dir, func() {
		t.Helper()
		if err := os.WriteFile(trigger, []byte("mf test: remount read-only"), 0); err != nil {
			t.Fatalf("making %s read-only: %v", dir, err)
		}
	}
}

// A store whose file system the kernel remounts read-only while it runs
// (ext4's errors=remount-ro after an I/O error; an operator's remount)
// takes no more writes: every ingest fails with storage.ErrReadOnly, and
// Ping fails with it, so /ready says not ready. Ping's SELECT succeeded on
// such a store, and the writes failed with SQLite's I/O error: /ready said
// ready while every message was answered AE.
func TestAStoreRemountedReadOnlyIsNotReady(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, remountReadOnly := ext4(t)
	s, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(dir, "mf.db"), Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ingest := func(id string) error {
		_, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
			Inbound: "in", ControlID: id, Payload: []byte("MSH|^~\\&|" + id), Status: storage.MessageUnrouted,
		}}})
		return err
	}
	if err := ingest("1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	remountReadOnly()

	for _, id := range []string{"2", "3"} { // the first meets it, the next knows it
		if err := ingest(id); !errors.Is(err, storage.ErrReadOnly) || !strings.Contains(err.Error(), "takes no writes") {
			t.Fatalf("ingest %s into a store whose file system was remounted read-only: %v; want storage.ErrReadOnly, saying the store takes no writes", id, err)
		}
	}
	if err := s.Ping(ctx); !errors.Is(err, storage.ErrReadOnly) {
		t.Fatalf("ping of a store whose file system was remounted read-only: %v; want storage.ErrReadOnly (/ready: not ready)", err)
	}
}

// cannotMount skips a test that needs a mount this process cannot make, or
// fails it with CI set: a CI run must not pass without it.
func cannotMount(t *testing.T, format string, args ...any) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf(format+" (CI=true: run the tests as root on a machine with loop devices and mkfs.ext4, as .ci/run does)", args...)
	}
	t.Skipf(format, args...)
}

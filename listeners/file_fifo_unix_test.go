//go:build unix

package listeners

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A named pipe put in the place of a listed file (whoever writes the drop
// directory can make one, or a link to one) is refused like any other
// file put there: opening it for reading waited for a writer that never
// comes, and the poller, stuck in the open, read no file again and kept
// the graph from ever stopping (a lost lease included).
func TestReadAtMostRefusesAPipePutInItsPlace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "adt.hl7")
	if err := os.WriteFile(path, []byte(adt("C1", "P1")), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := readAtMost(context.Background(), path, 1<<20, fi)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errReplaced) {
			t.Fatalf("readAtMost of a named pipe put in the file's place: %v; want errReplaced", err)
		}
	case <-time.After(5 * time.Second):
		// Let the open end, so that the test's directory can go.
		if w, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("readAtMost of a named pipe put in the file's place still waits after 5 s: the poller would be stuck in it for good")
	}
}

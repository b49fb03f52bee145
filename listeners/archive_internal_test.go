package listeners

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Two file inbounds may share an archive directory. When both archive a
// file of one name at once, each must land under a name of its own: a look
// for a free name and then a rename let the second replace the first, whose
// archived bytes were gone.
func TestArchiveNeverReplacesAFileOfTheSameName(t *testing.T) {
	archive := t.TempDir()
	const files = 300
	dirs := []string{t.TempDir(), t.TempDir()}
	for k, dir := range dirs {
		for i := range files {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.hl7", i)), fmt.Appendf(nil, "inbound %d file %d", k, i), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range files {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, dir := range dirs {
			wg.Go(func() {
				<-start
				name := fmt.Sprintf("f%d.hl7", i)
				if _, err := archiveFile(filepath.Join(dir, name), archive, name); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	entries, err := os.ReadDir(archive)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(archive, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		seen[string(b)] = true
	}
	if len(seen) != 2*files {
		t.Errorf("the archive holds %d distinct files (%d names); want %d: archiving replaced a file of the same name", len(seen), len(entries), 2*files)
	}
}

// Where renaming without replacing is not to be had, a hard link stands in:
// it fails on a name taken, and leaves both files as they were.
func TestLinkThenRemoveRefusesANameTaken(t *testing.T) {
	dir := t.TempDir()
	src, dest := filepath.Join(dir, "a.hl7"), filepath.Join(dir, "b.hl7")
	for path, body := range map[string]string{src: "new", dest: "archived"} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := linkThenRemove(src, dest); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("linkThenRemove onto a name taken: %v; want fs.ErrExist", err)
	}
	for path, want := range map[string]string{src: "new", dest: "archived"} {
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v); want %q", path, b, err, want)
		}
	}
	free := filepath.Join(dir, "c.hl7")
	if err := linkThenRemove(src, free); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(free); err != nil || string(b) != "new" {
		t.Errorf("moved file holds %q (%v); want \"new\"", b, err)
	}
	if _, err := os.Stat(src); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the source is still there after its move: %v", err)
	}
}

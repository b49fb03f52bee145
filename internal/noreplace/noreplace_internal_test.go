package noreplace

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

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

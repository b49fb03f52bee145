package listeners

import (
	"fmt"
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

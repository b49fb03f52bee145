//go:build !windows

package lanes

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/messagefoundry/mf/config"
)

// A FIFO or a symbolic link at the row's name is not its earlier write:
// the row goes to the next free name. Opening the FIFO to compare its
// bytes blocked until a writer came, so every send ran out of time, for
// ever, each leaving its temporary file (the whole message) and a thread
// behind (a review); a link to the same bytes elsewhere counted as written.
func TestFileSenderTakesNoFIFOOrLinkAtItsNameForItsWrite(t *testing.T) {
	t.Parallel()
	m := testMessage("MSG1")
	for _, kind := range []string{"fifo", "symlink"} {
		dir := t.TempDir()
		taken := filepath.Join(dir, "00000000000000000042.hl7")
		switch kind {
		case "fifo":
			if err := syscall.Mkfifo(taken, 0o640); err != nil {
				t.Fatal(err)
			}
		case "symlink":
			elsewhere := filepath.Join(t.TempDir(), "same.hl7")
			if err := os.WriteFile(elsewhere, m.Payload, 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, taken); err != nil {
				t.Fatal(err)
			}
		}
		s := newTestFileSenderOf(t, config.Outbound{Name: "drop", Type: config.OutboundFile, Directory: dir, CreateDirectory: true, TimeoutSeconds: 2})
		if err := s.Send(t.Context(), m); err != nil {
			t.Fatalf("%s at the row's name: %v; want the row written under the next free name", kind, err)
		}
		next := filepath.Join(dir, "00000000000000000042-1.hl7")
		if got, err := os.ReadFile(next); err != nil || string(got) != string(m.Payload) {
			t.Errorf("%s at the row's name: %s holds %q (%v); want the message", kind, next, got, err)
		}
		if names := listDir(t, dir); len(names) != 2 {
			t.Errorf("%s at the row's name: directory holds %v; want it and the message, no temporary file", kind, names)
		}
	}
}

package listeners

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
)

// A file held for an operator because one of its messages is larger than
// max_message_bytes is not read again while it stays unchanged: it was read
// whole and split at every poll (every second by default), up to
// max_file_bytes (64 MiB by default, 512 MiB at most) each time, for
// nothing. Changed (its size, time or inode), it is another file, and read.
func TestAHeldFileIsNotReadAgainAtEveryPoll(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	if err := os.Mkdir(in, 0o750); err != nil {
		t.Fatal(err)
	}
	oversize := adt("M2", "P1") + "NTE|1||" + strings.Repeat("x", 400) + "\r"
	if err := os.WriteFile(filepath.Join(in, "a.hl7"), []byte(adt("M1", "P1")+oversize), 0o600); err != nil {
		t.Fatal(err)
	}
	reads := 0
	f := &FilePoller{
		env: &Env{Ctx: context.Background()},
		cfg: config.Inbound{Name: "drop", Directory: in, ArchiveDirectory: filepath.Join(dir, "archive"),
			MaxMessageBytes: 300, MaxFileBytes: 1 << 20},
		log:       zerolog.Nop(),
		afterRead: func(string) { reads++ },
	}
	for range 10 {
		f.poll()
	}
	if f.held.name != "a.hl7" {
		t.Fatalf("a.hl7 not held (held %q)", f.held.name)
	}
	if reads != 1 {
		t.Fatalf("the held file was read %d times in 10 polls; want once (it has not changed since it was held)", reads)
	}
	if err := os.WriteFile(filepath.Join(in, "a.hl7"), []byte(oversize+adt("M3", "P1")+adt("M4", "P1")), 0o600); err != nil {
		t.Fatal(err)
	}
	f.poll()
	if reads != 2 {
		t.Fatalf("the held file, rewritten, was read %d times in all; want twice", reads)
	}
}

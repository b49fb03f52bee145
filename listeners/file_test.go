package listeners_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
)

// fileInbound is a file inbound "drop" polling {{dir}}/in every 50 ms into
// the file outbound "out", one lane per patient; {{extra}} adds keys to the
// inbound.
const fileInbound = `
[[inbound]]
name = "drop"
type = "file"
directory = "{{dir}}/in"
poll_interval_seconds = 0.05
{{extra}}

[[outbound]]
name = "out"
type = "file"
directory = "{{dir}}/out"

[[route]]
from = "drop"
to = ["out"]
lane_key = "PID-3.1"
`

// startFileInbound starts an engine with the file inbound of fileInbound and
// returns it and the inbound directory, once the poller has made it.
func startFileInbound(t *testing.T, extra string) (*enginetest.Engine, string) {
	t.Helper()
	e := enginetest.Start(t, strings.Replace(fileInbound, "{{extra}}", extra, 1))
	in := filepath.Join(e.Dir, "in")
	enginetest.WaitFor(t, "the inbound directory", 5*time.Second, func() bool {
		_, err := os.Stat(in)
		return err == nil
	})
	return e, in
}

// drop writes content into the inbound directory as a writer should: under
// a temporary name, then renamed to name.
func drop(t *testing.T, in, name, content string) {
	t.Helper()
	tmp := enginetest.WriteFile(t, in, "."+name+".tmp", []byte(content))
	if err := os.Rename(tmp, filepath.Join(in, name)); err != nil {
		t.Fatal(err)
	}
}

// storedIDs lists the control ids of the stored messages, in store order.
func storedIDs(t *testing.T, e *enginetest.Engine) string {
	t.Helper()
	var ids []string
	for _, d := range e.Messages(t) {
		ids = append(ids, d.Message.ControlID)
	}
	return strings.Join(ids, ",")
}

// logLines counts the engine's log lines that hold every one of parts.
func logLines(e *enginetest.Engine, parts ...string) int {
	n := 0
	for _, line := range strings.Split(e.Logs.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

func archived(in, name string) bool {
	_, err := os.Stat(filepath.Join(in, "archive", name))
	return err == nil
}

// When a file's messages are stored but the file cannot be moved to the
// archive, later polls only retry the move: the file is not stored again
// (it was, on every poll: one file stored 39 times in 2 s), no later file is
// read, and the failure is logged once, its end once. A file changed since
// is another file, read again.
func TestAFailedArchiveMoveStoresTheFileOnce(t *testing.T) {
	e, in := startFileInbound(t, "")
	// The archive path is a file: the move fails (ENOTDIR), as it would
	// across file systems (EXDEV) or without write permission.
	archive := filepath.Join(in, "archive")
	if err := os.Remove(archive); err != nil {
		t.Fatal(err)
	}
	enginetest.WriteFile(t, in, "archive", nil)

	drop(t, in, "a.hl7", adt("A1", "P1"))
	drop(t, in, "b.hl7", adt("B1", "P1"))
	retried := func() int { return logLines(e, `"file":"a.hl7"`, `"reason":"archive move failing"`) }
	enginetest.WaitFor(t, "polls retrying the move, or a.hl7 stored again", 10*time.Second, func() bool {
		return retried() >= 3 || strings.Count(storedIDs(t, e), "A1") > 1
	})
	if ids := storedIDs(t, e); ids != "A1" {
		t.Fatalf("stored %q after %d polls retried the move; want A1 once and nothing of the later b.hl7", ids, retried())
	}
	if n := logLines(e, `"level":"error"`, "cannot move an ingested file to the archive"); n != 1 {
		t.Fatalf("the failed move logged at ERROR %d times; want once", n)
	}

	// Rewritten while it waits: another file, read again.
	drop(t, in, "a.hl7", adt("A2", "P1"))
	enginetest.WaitFor(t, "the rewritten a.hl7 stored", 10*time.Second, func() bool {
		return strings.HasPrefix(storedIDs(t, e), "A1,A2")
	})

	if err := os.Remove(archive); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(archive, 0o750); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "both files archived", 10*time.Second, func() bool {
		return archived(in, "a.hl7") && archived(in, "b.hl7")
	})
	if ids := storedIDs(t, e); ids != "A1,A2,B1" {
		t.Fatalf("stored %q; want A1,A2,B1", ids)
	}
	if n := logLines(e, "the ingested file that could not be archived is archived now"); n != 1 {
		t.Fatalf("the move's success logged %d times; want once", n)
	}
}

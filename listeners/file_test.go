package listeners_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/listeners"
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
	e, in := startFileInbound(t, "settle_seconds = 0")
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

// A file written in place is not read until it has settled: read while its
// writer was still at it, its first message was stored cut short (one OBX
// of two) as if whole, and the rest archived unread.
func TestAFileStillBeingWrittenIsNotReadInPart(t *testing.T) {
	e, in := startFileInbound(t, "settle_seconds = 30")
	whole := adt("W1", "P1") + "OBX|1|ST|A||first\rOBX|2|ST|B||second\r" + adt("W2", "P1")
	cut := strings.Index(whole, "OBX|2")
	path := filepath.Join(in, "lab.hl7")
	w, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString(whole[:cut]); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "polls waiting for lab.hl7 to settle, or a message stored", 10*time.Second, func() bool {
		return logLines(e, `"file":"lab.hl7"`, `"reason":"settling"`) >= 3 || len(e.Messages(t)) > 0
	})
	if ids := storedIDs(t, e); ids != "" {
		t.Fatalf("stored %q from a file still being written", ids)
	}

	if _, err := w.WriteString(whole[cut:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Written a minute ago, as far as the poller can tell: settled.
	past := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, past, past); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "lab.hl7 archived", 10*time.Second, func() bool { return archived(in, "lab.hl7") })
	var got []string
	for _, d := range e.Messages(t) {
		got = append(got, d.Message.ControlID+" with "+strconv.Itoa(strings.Count(string(d.Message.Payload), "OBX"))+" OBX")
	}
	if strings.Join(got, ", ") != "W1 with 2 OBX, W2 with 0 OBX" {
		t.Fatalf("stored %v; want W1 with 2 OBX, W2 with 0 OBX", got)
	}
}

// A file dated in the future (its writer's clock is ahead of ours) is read
// once this poller has seen it unchanged for settle_seconds, not once our
// clock has caught up.
func TestAFileDatedInTheFutureIsReadOnceItStopsChanging(t *testing.T) {
	_, in := startFileInbound(t, "settle_seconds = 0.2")
	tmp := enginetest.WriteFile(t, in, ".ahead.tmp", []byte(adt("F1", "P1")))
	ahead := time.Now().Add(time.Hour)
	if err := os.Chtimes(tmp, ahead, ahead); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(in, "ahead.hl7")); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "ahead.hl7 archived", 10*time.Second, func() bool { return archived(in, "ahead.hl7") })
}

// A file that begins with a UTF-8 byte order mark: its first message was
// rejected ("first segment is not MSH"), its bytes kept as rejected.
func TestSplitMessagesDropsAByteOrderMark(t *testing.T) {
	msgs := listeners.SplitMessages([]byte("\xEF\xBB\xBF" + adt("B1", "P1") + adt("B2", "P1")))
	if len(msgs) != 2 {
		t.Fatalf("%d messages; want 2", len(msgs))
	}
	for i, raw := range msgs {
		if _, err := hl7.Parse(raw); err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
	}
}

package listeners_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

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
// returns it and the inbound directory, once the poller has made it and its
// archive directory (made after it: a test that replaces the archive ran
// into the gap between the two).
func startFileInbound(t *testing.T, extra string) (*enginetest.Engine, string) {
	t.Helper()
	e := enginetest.Start(t, strings.Replace(fileInbound, "{{extra}}", extra, 1))
	in := filepath.Join(e.Dir, "in")
	enginetest.WaitFor(t, "the inbound directory and its archive", 5*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(in, "archive"))
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
// read, and the failure is logged once, its end once. A file changed since,
// or another put in its place, is another file, read again.
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

	// Put in its place while it waits, with the same size and modification
	// time (a coarse clock, cp -p): another file all the same, read again.
	before, err := os.Stat(filepath.Join(in, "a.hl7"))
	if err != nil {
		t.Fatal(err)
	}
	// Its time set before it is renamed into place: set after, a poll
	// between the two saw the file with another time, then with this one,
	// a file changed since, and stored it twice ("A1,A2,A2,B1" in CI).
	tmp := enginetest.WriteFile(t, in, ".a.hl7.tmp", []byte(adt("A2", "P1")))
	if err := os.Chtimes(tmp, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(in, "a.hl7")); err != nil {
		t.Fatal(err)
	}
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

// A file whose messages are stored but whose move failed, then taken away
// by hand, is let go of once: the later files are read, and the WARN that
// says so is not repeated at every poll after.
func TestAnUnarchivedFileTakenAwayIsLetGoOfOnce(t *testing.T) {
	e, in := startFileInbound(t, "settle_seconds = 0")
	archive := filepath.Join(in, "archive")
	if err := os.Remove(archive); err != nil {
		t.Fatal(err)
	}
	enginetest.WriteFile(t, in, "archive", nil) // the move fails
	drop(t, in, "a.hl7", adt("A1", "P1"))
	enginetest.WaitFor(t, "polls retrying the move of a.hl7", 10*time.Second, func() bool {
		return logLines(e, `"file":"a.hl7"`, `"reason":"archive move failing"`) >= 2
	})
	if err := os.Remove(filepath.Join(in, "a.hl7")); err != nil { // moved away by hand
		t.Fatal(err)
	}
	if err := os.Remove(archive); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(archive, 0o750); err != nil {
		t.Fatal(err)
	}
	drop(t, in, "b.hl7", adt("B1", "P1"))
	enginetest.WaitFor(t, "b.hl7 archived", 10*time.Second, func() bool { return archived(in, "b.hl7") })
	drop(t, in, "c.hl7", adt("C1", "P1")) // polls after the one that let a.hl7 go
	enginetest.WaitFor(t, "c.hl7 archived", 10*time.Second, func() bool { return archived(in, "c.hl7") })
	if ids := storedIDs(t, e); ids != "A1,B1,C1" {
		t.Fatalf("stored %q; want A1,B1,C1", ids)
	}
	if n := logLines(e, `"file":"a.hl7"`, "could not be archived is gone"); n != 1 {
		t.Fatalf("the WARN that a.hl7 is gone logged %d times; want once", n)
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

// Files concatenated by a Windows tool (copy /b a.hl7+b.hl7, type *.hl7)
// keep each one's byte order mark, so a later message's MSH can follow one
// too. That MSH was not taken for the start of a message: the message was
// glued to the one before it as one of its segments, routed and delivered
// inside it, in its lane, and its own routes never looked at.
func TestSplitMessagesDropsAByteOrderMarkBeforeALaterMSH(t *testing.T) {
	msgs := listeners.SplitMessages([]byte("\xEF\xBB\xBF" + adt("B1", "P1") + "\xEF\xBB\xBF" + adt("B2", "P2")))
	if len(msgs) != 2 {
		t.Fatalf("%d messages %q; want 2", len(msgs), msgs)
	}
	for i, raw := range msgs {
		m, err := hl7.Parse(raw)
		if err != nil || bytes.Contains(raw, []byte("\xEF\xBB\xBF")) || m.ControlID() != fmt.Sprintf("B%d", i+1) {
			t.Fatalf("message %d: %q, %v", i+1, raw, err)
		}
	}
}

// A batch file of no message (FHS, BHS, BTS|0, FTS: a nightly feed with
// nothing to send) is valid HL7 and holds no message: it was stored whole as
// one rejected message ("first segment is not MSH"), with a WARN telling the
// operator to have its writer fix it. A file of segments that are neither
// envelope nor MSH is still one rejected message.
func TestSplitMessagesOfAnEmptyBatchIsNone(t *testing.T) {
	if msgs := listeners.SplitMessages([]byte("FHS|^~\\&|S\rBHS|^~\\&|S\rBTS|0\rFTS|1\r")); len(msgs) != 0 {
		t.Fatalf("an empty batch: %d messages %q; want none", len(msgs), msgs)
	}
	if msgs := listeners.SplitMessages([]byte("FHS|^~\\&|S\rNOT|HL7\rFTS|1\r")); len(msgs) != 1 || string(msgs[0]) != "NOT|HL7\r" {
		t.Fatalf("a batch of a segment that is no message: %q; want that one segment as a message", msgs)
	}
}

// A file that is a capture of MLLP frames (0x0B message 0x1C CR, as some
// systems write them) holds its messages: it was one message, stored as
// rejected, block characters and all.
func TestSplitMessagesOfMLLPFramesIsTheirMessages(t *testing.T) {
	msgs := listeners.SplitMessages([]byte("\x0b" + adt("F1", "P1") + "\x1c\r\x0b" + adt("F2", "P1") + "\x1c\r"))
	if len(msgs) != 2 {
		t.Fatalf("%d messages %q; want 2", len(msgs), msgs)
	}
	for i, raw := range msgs {
		m, err := hl7.Parse(raw)
		if err != nil || bytes.ContainsAny(raw, "\x0b\x1c") || m.ControlID() != fmt.Sprintf("F%d", i+1) {
			t.Fatalf("message %d: %q, %v", i+1, raw, err)
		}
	}
}

// Lines of only spaces or tabs (a padded file, an editor's last line) are
// no segments: before an MSH one made a message of its own, stored as
// rejected, and inside a message a segment the receiver could not parse.
func TestSplitMessagesDropsBlankLines(t *testing.T) {
	msgs := listeners.SplitMessages([]byte("  \r\n" + adt("B1", "P1") + " \t\r" + adt("B2", "P1") + "   \n"))
	if len(msgs) != 2 {
		t.Fatalf("%d messages; want 2", len(msgs))
	}
	for i, raw := range msgs {
		if _, err := hl7.Parse(raw); err != nil || bytes.Contains(raw, []byte(" \t")) {
			t.Fatalf("message %d: %q, %v", i+1, raw, err)
		}
	}
}

// SplitMessages walks a file's segments rather than split them all first: a
// 4 MiB file of one-byte segments cost 48 MiB of slices at once before.
func TestSplitMessagesAllocatesAboutTheFile(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(adt("A1", "P1"))
	for b.Len() < 4<<20 {
		b.WriteString("Z\r")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	msgs := listeners.SplitMessages(b.Bytes())
	runtime.ReadMemStats(&after)
	if len(msgs) != 1 {
		t.Fatalf("%d messages; want 1", len(msgs))
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 4*uint64(b.Len()) {
		t.Fatalf("splitting a %d-byte file allocated %d bytes", b.Len(), allocated)
	}
}

// A file larger than max_file_bytes is not read (a misplaced multi-GB file
// ran the process out of memory, again on every restart): it holds up the
// later files, logged once with what to do, until it is moved away.
func TestAFileLargerThanMaxFileBytesIsNotRead(t *testing.T) {
	e, in := startFileInbound(t, "settle_seconds = 0\nmax_file_bytes = 1000")
	big := strings.Repeat(adt("A1", "P1"), 8)
	drop(t, in, "a.hl7", big)
	drop(t, in, "b.hl7", adt("B1", "P1"))
	waited := func() int { return logLines(e, `"file":"a.hl7"`, `"reason":"larger than max_file_bytes"`) }
	enginetest.WaitFor(t, "polls held up by a.hl7, or a message stored", 10*time.Second, func() bool {
		return waited() >= 3 || len(e.Messages(t)) > 0
	})
	if ids := storedIDs(t, e); ids != "" {
		t.Fatalf("stored %q from a file of %d bytes with max_file_bytes = 1000, or from the later b.hl7", ids, len(big))
	}
	if n := logLines(e, `"level":"error"`, `"file":"a.hl7"`, `"bytes":`+strconv.Itoa(len(big)), `"max_file_bytes":1000`); n != 1 {
		t.Fatalf("the file too large logged at ERROR %d times with its size and the bound; want once", n)
	}

	if err := os.Rename(filepath.Join(in, "a.hl7"), filepath.Join(e.Dir, "a.hl7")); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "b.hl7 archived", 10*time.Second, func() bool { return archived(in, "b.hl7") })
	if ids := storedIDs(t, e); ids != "B1" {
		t.Fatalf("stored %q; want B1", ids)
	}
}

// A file holding a message larger than max_message_bytes is not stored at
// all: it holds up the later files, logged once with the message's position
// and size, until it is taken out; then the later files are read. Dropped
// from the file and archived, the message reached nobody, and no one heard
// of it but the log.
func TestAFileWithAnOversizeMessageIsHeld(t *testing.T) {
	e, in := startFileInbound(t, "settle_seconds = 0\nmax_message_bytes = 300")
	oversize := adt("M2", "P1") + "NTE|1||" + strings.Repeat("x", 400) + "\r"
	content := adt("M1", "P1") + oversize + adt("M3", "P1")
	rejected0 := rejectedOversize(t)
	drop(t, in, "a.hl7", content)
	drop(t, in, "b.hl7", adt("B1", "P1"))
	held := func() int { return logLines(e, `"file":"a.hl7"`, `"reason":"a message larger than max_message_bytes"`) }
	enginetest.WaitFor(t, "polls held up by a.hl7, or a message stored", 10*time.Second, func() bool {
		return held() >= 3 || len(e.Messages(t)) > 0
	})
	if ids := storedIDs(t, e); ids != "" {
		t.Fatalf("stored %q from a file with a message over max_message_bytes, or from the later b.hl7", ids)
	}
	if n := rejectedOversize(t) - rejected0; n != 1 {
		t.Fatalf("%v counted rejected as oversize; want 1 (once per file, not per poll)", n)
	}
	if n := logLines(e, `"file":"a.hl7"`, `"message":2`, `"bytes":`+strconv.Itoa(len(oversize)), "larger than max_message_bytes"); n != 1 {
		t.Fatalf("%d log lines name the file, the message's position and size; want 1:\n%s", n, e.Logs.String())
	}
	if err := os.Rename(filepath.Join(in, "a.hl7"), filepath.Join(t.TempDir(), "a.hl7")); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "b.hl7 archived once a.hl7 is gone", 10*time.Second, func() bool { return archived(in, "b.hl7") })
	if ids := storedIDs(t, e); ids != "B1" {
		t.Fatalf("stored %q; want B1", ids)
	}
}

// rejectedOversize reads mf_messages_rejected_total of the inbound drop for
// reason oversize.
func rejectedOversize(t *testing.T) float64 {
	t.Helper()
	var buf bytes.Buffer
	metrics.WritePrometheus(&buf, false)
	for _, line := range strings.Split(buf.String(), "\n") {
		if v, ok := strings.CutPrefix(line, `mf_messages_rejected_total{inbound="drop",reason="oversize"} `); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// A message of an inbound file that is not HL7 v2 is kept as rejected, as
// one that came over MLLP, whose sender hears AR and whose line is a WARN.
// A file's writer hears nothing: the operator must, but no line said it,
// only "inbound file ingested and archived". One WARN per file says how
// many of its messages were rejected, the first one's id and why, never
// their content.
func TestRejectedMessagesOfAnInboundFileAreLogged(t *testing.T) {
	e, in := startFileInbound(t, "settle_seconds = 0")
	bad := strings.Replace(adt("BAD1", "SECRETMRN4711"), "|^~\\&|", "|^|", 1)
	drop(t, in, "mixed.hl7", adt("OK1", "P1")+bad+bad)
	enginetest.WaitFor(t, "mixed.hl7 archived", 10*time.Second, func() bool { return archived(in, "mixed.hl7") })
	var first int64
	for _, d := range e.Messages(t) {
		if d.Message.Status == "rejected" && first == 0 {
			first = d.Message.ID
		}
	}
	if n := logLines(e, `"level":"warn"`, `"file":"mixed.hl7"`, `"rejected":2`, `"messages":3`,
		`"message_id":`+strconv.FormatInt(first, 10), `"reason":"hl7: bad separators`); n != 1 || first == 0 {
		t.Fatalf("%d WARN lines name mixed.hl7's 2 rejected messages of 3, the first (%d) and why; want one:\n%s", n, first, e.Logs.String())
	}
	if strings.Contains(e.Logs.String(), "SECRETMRN4711") {
		t.Fatalf("the logs carry the rejected message's patient id:\n%s", e.Logs.String())
	}
}

// A message of an inbound file with bad encoding characters (MSH-2) but a
// usable field separator keeps its control id, found by MSH-1 alone, as
// one that came over MLLP does: the operator traces it to its writer by
// it. It was stored with none.
func TestARejectedMessageOfAFileKeepsItsControlID(t *testing.T) {
	e, in := startFileInbound(t, "settle_seconds = 0")
	drop(t, in, "bad.hl7", strings.Replace(adt("BADCTL", "P1"), "|^~\\&|", "|^|", 1))
	enginetest.WaitFor(t, "bad.hl7 archived", 10*time.Second, func() bool { return archived(in, "bad.hl7") })
	msgs := e.Messages(t)
	if len(msgs) != 1 || msgs[0].Message.Status != "rejected" || msgs[0].Message.ControlID != "BADCTL" {
		var got []string
		for _, d := range msgs {
			got = append(got, fmt.Sprintf("%s %q", d.Message.Status, d.Message.ControlID))
		}
		t.Fatalf("stored %v; want one rejected message with control id BADCTL", got)
	}
}

// A file inbound whose directory is not there makes it, as a fresh install
// expects; but a directory meant to be a share that is not mounted is made
// on the local disk, and polled empty for as long as the share stays away.
// The poller says so when it makes a directory, naming it: it made it
// silently.
func TestAFileInboundSaysWhenItMakesItsDirectory(t *testing.T) {
	e, in := startFileInbound(t, "")
	archive := filepath.Join(in, "archive")
	for _, dir := range []string{in, archive} {
		if logLines(e, `"level":"warn"`, `"directory":"`+dir+`"`, "made") != 1 {
			t.Errorf("no WARN saying that %s was made:\n%s", dir, e.Logs.String())
		}
	}
}

// A directory on a share must not be made on the local disk when the share
// is not mounted: with create_directory = false the poller makes neither
// directory, says so, and reads the files once the directory is there.
func TestAFileInboundToldNotToCreateItsDirectoriesDoesNot(t *testing.T) {
	e := enginetest.Start(t, strings.Replace(fileInbound, "{{extra}}", "create_directory = false", 1))
	in := filepath.Join(e.Dir, "in")
	enginetest.WaitFor(t, "the ERROR naming the missing directory", 5*time.Second, func() bool {
		return logLines(e, `"level":"error"`, `"directory":"`+in+`"`, "create_directory") == 1
	})
	if _, err := os.Stat(in); !os.IsNotExist(err) {
		t.Fatalf("the inbound directory was made (stat: %v)", err)
	}
	// The share comes up: its files are read and archived where it keeps them.
	if err := os.MkdirAll(filepath.Join(in, "archive"), 0o750); err != nil {
		t.Fatal(err)
	}
	drop(t, in, "a.hl7", adt("CTL1", "P1"))
	enginetest.WaitFor(t, "the file archived", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(in, "archive", "a.hl7"))
		return err == nil
	})
	if got := storedIDs(t, e); got != "CTL1" {
		t.Errorf("stored %q, want CTL1", got)
	}
}

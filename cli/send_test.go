package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
)

// mf send of a file without a message fails and names the file: it used to
// print "sent 0 messages" and exit 0, which a script takes for success.
func TestSendOfAFileWithoutMessagesFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.hl7")
	if err := os.WriteFile(empty, []byte("\r\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing listens there: the file must be refused before any sending.
	out, err := runMF(t, "send", "--to", enginetest.FreeAddr(t), empty)
	if err == nil || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "no HL7 message (it is empty, holds only blank lines, or is a batch of no message)") {
		t.Fatalf("mf send of a file without messages: error %v, printed %q; want one naming %s", err, out, empty)
	}
	// Batch envelope segments alone (BTS|0) are a batch of no message, as a
	// file inbound reads them: refused the same way.
	envelope := filepath.Join(dir, "envelope.hl7")
	if err := os.WriteFile(envelope, []byte("FHS|^~\\&|A\rBHS|^~\\&|A\rBTS|0\rFTS|1\r"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = runMF(t, "send", "--to", enginetest.FreeAddr(t), "--timeout", "1s", envelope)
	if err == nil || !strings.Contains(err.Error(), envelope) || !strings.Contains(err.Error(), "a batch of no message") {
		t.Fatalf("mf send of a file of batch envelope segments alone: error %v, printed %q; want one naming %s", err, out, envelope)
	}
	// A file with no MSH but something else is one message, sent whole (the
	// receiver answers AR), as a file inbound stores it.
	junk := filepath.Join(dir, "junk.hl7")
	if err := os.WriteFile(junk, []byte("NOT|HL7\r"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = runMF(t, "send", "--to", enginetest.FreeAddr(t), "--timeout", "1s", junk)
	if err == nil || strings.Contains(err.Error(), "no HL7 message") || !strings.Contains(out, "sent 1 messages") {
		t.Fatalf("mf send of a file of no MSH: error %v, printed %q; want it sent as one message", err, out)
	}
}

// mf send refuses a --connections or --repeat below 1 and a --timeout that
// is not positive, naming the flag: --connections 0 was taken for 1 and
// --repeat 0 for 1, and --timeout 0 failed every send at once.
func TestSendRefusesFlagsOutOfRange(t *testing.T) {
	msg := filepath.Join(t.TempDir(), "adt.hl7")
	if err := os.WriteFile(msg, []byte("MSH|^~\\&|A|B|C|D|20240101000000||ADT^A01|C1|P|2.5.1\rPID|1||P1\r"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing listens there: a flag taken would end in a send that fails
	// within the 1s timeout, not in an error naming the flag.
	to := enginetest.FreeAddr(t)
	for _, tc := range []struct{ flag, value string }{
		{"--connections", "0"}, {"--connections", "-2"},
		{"--repeat", "0"}, {"--repeat", "-1"},
		{"--timeout", "0s"}, {"--timeout", "-1s"},
	} {
		args := []string{"send", "--to", to, "--timeout", "1s", tc.flag, tc.value, msg}
		out, err := runMF(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag+" ") {
			t.Errorf("mf send %s %s: error %v, printed %q; want an error naming %s", tc.flag, tc.value, err, out, tc.flag)
		}
	}
}

// mf send's rate counts the messages accepted, not those tried: a target
// that refused every connection printed thousands of messages a second.
func TestSendRateCountsOnlyAcceptedMessages(t *testing.T) {
	msg := filepath.Join(t.TempDir(), "adt.hl7")
	if err := os.WriteFile(msg, []byte(enginetest.ADT("C1", "P1")+"\n"+enginetest.ADT("C2", "P2")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runMF(t, "send", "--to", enginetest.FreeAddr(t), "--timeout", "5s", msg)
	if err == nil || !strings.Contains(out, "0 msg/s accepted; accepted 0, not accepted 2") {
		t.Fatalf("mf send to nothing: error %v, printed %q; want '0 msg/s accepted; accepted 0, not accepted 2'", err, out)
	}
	out, err = runMF(t, "send", "--to", ackServer{code: hl7.AA}.start(t), msg)
	if err != nil || !strings.Contains(out, "1 C1: accepted\n") || !strings.Contains(out, "msg/s accepted; accepted 2, not accepted 0") {
		t.Fatalf("mf send: error %v, printed %q; want each ACK and 'accepted 2, not accepted 0'", err, out)
	}
}

// A message with MSH-15 ER (or NE) asks its receiver for no ACK when it
// accepts, so mf send on one connection does not wait for one: it printed
// "accepted" for it, and exited 0, even when the receiver refused it (AR).
// It says sent, and counts it apart.
func TestSendDoesNotCallAMessageWithoutAnACKAccepted(t *testing.T) {
	msg := filepath.Join(t.TempDir(), "er.hl7")
	if err := os.WriteFile(msg, []byte("MSH|^~\\&|A|B|C|D|20240101000000||ADT^A01|ER1|P|2.5.1|||ER\rPID|1||P1\r"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runMF(t, "send", "--to", ackServer{code: hl7.AR}.start(t), "--timeout", "5s", msg)
	if err != nil || strings.Contains(out, "ER1: accepted") ||
		!strings.Contains(out, "1 ER1: sent, no ACK awaited (MSH-15 ER") ||
		!strings.Contains(out, "accepted 0, not accepted 0, sent without an ACK (MSH-15 NE or ER) 1\n") {
		t.Fatalf("mf send of an MSH-15 ER message to a receiver that refuses it: error %v, printed %q; want it reported sent without an ACK, not accepted", err, out)
	}
}

// A flag after the files (mf send FILE --to HOST:PORT) is named as one,
// with where flags go, and nothing is sent: it was "open --to: no such
// file or directory", which names a file nobody meant.
func TestSendSaysFlagsGoBeforeTheFiles(t *testing.T) {
	msg := filepath.Join(t.TempDir(), "adt.hl7")
	if err := os.WriteFile(msg, []byte("MSH|^~\\&|A|B|C|D|20240101000000||ADT^A01|C1|P|2.5.1\rPID|1||P1\r"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runMF(t, "send", msg, "--to", enginetest.FreeAddr(t))
	if err == nil || !strings.Contains(err.Error(), `"--to" is a flag after the files`) || out != "" {
		t.Fatalf("mf send FILE --to ADDR: error %v, printed %q; want --to named as a flag after the files, and nothing sent", err, out)
	}
}

// A --repeat whose count of sends does not fit an int is refused: the
// count wrapped to a negative number, and mf send printed "sent -2
// messages", sent nothing and exited 0.
func TestSendRefusesARepeatThatOverflows(t *testing.T) {
	msgs := filepath.Join(t.TempDir(), "two.hl7")
	if err := os.WriteFile(msgs, []byte("MSH|^~\\&|A|B|C|D|20240101000000||ADT^A01|C1|P|2.5.1\rPID|1||P1\rMSH|^~\\&|A|B|C|D|20240101000000||ADT^A01|C2|P|2.5.1\rPID|1||P2\r"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runMF(t, "send", "--to", enginetest.FreeAddr(t), "--repeat", "9223372036854775807", msgs)
	if err == nil || !strings.Contains(err.Error(), "--repeat 9223372036854775807") {
		t.Fatalf("mf send --repeat 9223372036854775807 of two messages: error %v, printed %q; want --repeat refused", err, out)
	}
}

// mf send of a message without a control id (MSH-10 empty, or only
// blanks) to mf's listener, which refuses it AR with MSA-2 empty: the line
// names the message by its place, says it has no control id, and gives the
// receiver's reason; the run fails.
func TestSendReportsTheRefusalOfAMessageWithoutAControlID(t *testing.T) {
	t.Parallel()
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "`+addr+`"

[[outbound]]
name = "out"
type = "file"
directory = "{{dir}}/out"

[[route]]
from = "adt_in"
to = ["out"]
`)
	msg := filepath.Join(t.TempDir(), "noctl.hl7")
	content := enginetest.ADT("", "P1") + enginetest.ADT("  ", "P2") + enginetest.ADT("C3", "P3")
	if err := os.WriteFile(msg, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runMF(t, "send", "--to", addr, "--timeout", "10s", msg)
	if err == nil || !strings.Contains(err.Error(), "2 of 3 messages were not accepted") {
		t.Fatalf("mf send: error %v, printed %q; want 2 of 3 not accepted", err, out)
	}
	for _, want := range []string{"1 (no control id): ", "2 (no control id): ", "3 C3: accepted\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("mf send printed %q; want a line starting %q", out, want)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "1 ") || strings.HasPrefix(line, "2 ") {
			if !strings.Contains(line, "rejected") || !strings.Contains(line, "AR") || !strings.Contains(line, "no control ID (MSH-10)") ||
				strings.Contains(line, "could not read the message") {
				t.Errorf("mf send line %q; want it to say AR, rejected, and the receiver's reason naming MSH-10", line)
			}
		}
	}
}

// "-" sends the messages of the standard input (it was refused as a flag
// after the files), and TLS flags without --tls are refused in the flags'
// own words (the error named config keys of an outbound "send").
func TestSendReadsTheStandardInputAndNamesItsTLSFlags(t *testing.T) {
	var out bytes.Buffer
	app := App(&out, &out)
	app.Reader = strings.NewReader(enginetest.ADT("IN1", "P1") + "\n" + enginetest.ADT("IN2", "P2"))
	err := app.Run([]string{"mf", "send", "--to", ackServer{code: hl7.AA}.start(t), "-"})
	if err != nil || !strings.Contains(out.String(), "1 IN1: accepted\n") || !strings.Contains(out.String(), "accepted 2, not accepted 0") {
		t.Fatalf("mf send - with two messages on stdin: error %v, printed %q", err, out.String())
	}
	_, err = runMF(t, "send", "--to", enginetest.FreeAddr(t), "--tls-ca", "ca.pem", "-")
	if err == nil || !strings.Contains(err.Error(), "--tls-ca, --tls-cert, --tls-key and --server-name need --tls") {
		t.Fatalf("mf send --tls-ca without --tls: %v; want the flags named", err)
	}
	_, err = runMF(t, "send", "--to", enginetest.FreeAddr(t), "--tls", "--tls-cert", "c.pem", "-")
	if err == nil || !strings.Contains(err.Error(), "--tls-cert and --tls-key go together") {
		t.Fatalf("mf send --tls --tls-cert without --tls-key: %v; want the flags named", err)
	}
}

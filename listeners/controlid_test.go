package listeners_test

import (
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
)

// withoutControlID are messages whose MSH-10, the control id HL7 requires,
// is missing: empty, only blanks, or beyond the MSH's last field. Each holds
// its name in PID-3, to find it in the store.
var withoutControlID = map[string]string{
	"NOCTL_EMPTY":  adt("", "NOCTL_EMPTY"),
	"NOCTL_BLANKS": adt(" \t ", "NOCTL_BLANKS"),
	"NOCTL_SHORT":  "MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01^ADT_A01\rPID|1||NOCTL_SHORT^^^HOSP^MR\r",
}

// checkStoredWithoutControlID fails unless every message of withoutControlID
// is stored rejected, with no queue row and an error naming MSH-10.
func checkStoredWithoutControlID(t *testing.T, e *enginetest.Engine) {
	t.Helper()
	enginetest.WaitFor(t, "the messages without a control id stored", 10*time.Second, func() bool {
		n := 0
		for _, d := range e.Messages(t) {
			for name := range withoutControlID {
				if strings.Contains(string(d.Message.Payload), "|"+name+"^") {
					n++
				}
			}
		}
		return n == len(withoutControlID)
	})
	for _, d := range e.Messages(t) {
		for name := range withoutControlID {
			if !strings.Contains(string(d.Message.Payload), "|"+name+"^") {
				continue
			}
			if d.Message.Status != storage.MessageRejected || len(d.Queue) != 0 || !strings.Contains(d.Message.Error, "MSH-10") {
				t.Errorf("%s stored %s with %d queue rows, error %q; want rejected, no queue row, an error naming MSH-10",
					name, d.Message.Status, len(d.Queue), d.Message.Error)
			}
		}
	}
}

// A message whose MSH-10 (the message control id, required in HL7 v2) is
// empty, only blanks or missing is answered AR (CR in enhanced mode) with
// condition 101 (required field missing) and a reason naming MSH-10, kept
// as rejected and counted as reason="no_control_id"; MSA-2 is empty, there
// being nothing to echo. It was answered AA with an empty MSA-2 and
// delivered: its sender could not tell which message the ACK answered, and
// an operator could not find it by its control id.
func TestAMessageWithoutAControlIDIsRejected(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	cfg := strings.NewReplacer("{{listen}}", addr, `"adt_in"`, `"noctl_in"`).Replace(ackConfig)
	e := enginetest.Start(t, cfg)
	const series = `mf_messages_rejected_total{inbound="noctl_in",reason="no_control_id"}`
	before := counterValue(t, series)
	cl := dial(t, addr)
	for name, msg := range withoutControlID {
		ack := cl.Send(msg)
		if ack.Code != hl7.AR || ack.ControlID != "" || ack.ErrorCode != "101" || !strings.Contains(ack.Text+ack.ErrorMessage, "MSH-10") {
			t.Fatalf("%s: %+v; want AR, MSA-2 empty, condition 101, a reason naming MSH-10", name, ack)
		}
	}
	// Enhanced mode (MSH-15 set): CR.
	enhanced := strings.Replace(adt("", "NOCTL_AL"), "|P|2.5.1\r", "|P|2.5.1|||AL|NE\r", 1)
	if ack := cl.Send(enhanced); ack.Code != hl7.CR || ack.ControlID != "" || ack.ErrorCode != "101" {
		t.Fatalf("an enhanced-mode message without MSH-10: %+v; want CR, condition 101", ack)
	}
	// The connection goes on.
	if ack := cl.Send(adt("CTLOK", "P1")); ack.Code != hl7.AA || ack.ControlID != "CTLOK" {
		t.Fatalf("the same connection after the refusals: %+v; want AA for CTLOK", ack)
	}
	checkStoredWithoutControlID(t, e)
	if n := counterValue(t, series) - before; n != float64(len(withoutControlID)+1) {
		t.Fatalf("%s rose by %v, want %d", series, n, len(withoutControlID)+1)
	}
	if n := strings.Count(e.Logs.String(), "no control ID (MSH-10)"); n == 0 {
		t.Fatalf("no WARN line says a message had no control ID (MSH-10):\n%s", e.Logs.String())
	}
}

// A file inbound refuses a message without a control id as a listener
// does: kept as rejected, counted, and named in the file's WARN.
func TestAFileInboundRejectsAMessageWithoutAControlID(t *testing.T) {
	e, in := startFileInbound(t, "settle_seconds = 0")
	const series = `mf_messages_rejected_total{inbound="drop",reason="no_control_id"}`
	before := counterValue(t, series)
	content := adt("FILEOK", "P1")
	for _, msg := range withoutControlID {
		content += msg
	}
	drop(t, in, "noctl.hl7", content)
	enginetest.WaitFor(t, "noctl.hl7 archived", 10*time.Second, func() bool { return archived(in, "noctl.hl7") })
	checkStoredWithoutControlID(t, e)
	if n := counterValue(t, series) - before; n != float64(len(withoutControlID)) {
		t.Fatalf("%s rose by %v, want %d", series, n, len(withoutControlID))
	}
	if n := logLines(e, `"level":"warn"`, `"file":"noctl.hl7"`, `"rejected":3`, `no control ID (MSH-10)`); n != 1 {
		t.Fatalf("%d WARN lines say noctl.hl7 had messages rejected for having no control ID; want one:\n%s", n, e.Logs.String())
	}
}

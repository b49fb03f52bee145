package listeners_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
)

// withProcessingID is adt with MSH-11 set to id ("" for none).
func withProcessingID(controlID, id string) string {
	return strings.Replace(adt(controlID, "P1"), "|P|2.5.1\r", "|"+id+"|2.5.1\r", 1)
}

// An inbound with processing_id = "P" takes production messages only: a
// training or debugging one (MSH-11 T or D), or one without MSH-11, is
// answered AR with condition 202 (unsupported processing ID) and kept as
// rejected, never routed. Nothing checked MSH-11: a test system pointed at
// the production engine had its messages delivered to production systems.
func TestAnInboundTakesItsProcessingIDOnly(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	cfg := strings.Replace(strings.ReplaceAll(ackConfig, "{{listen}}", addr), "max_message_bytes = 1024\n", "max_message_bytes = 1024\nprocessing_id = \"P\"\n", 1)
	e := enginetest.Start(t, cfg)
	rejected := metrics.GetOrCreateCounter(`mf_messages_rejected_total{inbound="adt_in",reason="processing_id"}`)
	before := rejected.Get()
	c := dial(t, addr)
	if ack := c.Send(withProcessingID("PROD1", "P")); ack.Code != hl7.AA {
		t.Fatalf("a production message: %+v; want AA", ack)
	}
	// Padded by a fixed-width sender: still P.
	if ack := c.Send(withProcessingID("PROD2", "P ")); ack.Code != hl7.AA {
		t.Fatalf("a production message with MSH-11 \"P \": %+v; want AA", ack)
	}
	for _, id := range []string{"T", "D", ""} {
		ack := c.Send(withProcessingID("NOTPROD"+id, id))
		if ack.Code != hl7.AR || ack.ControlID != "NOTPROD"+id || ack.ErrorCode != "202" || !strings.Contains(ack.Text+ack.ErrorMessage, "processing_id") {
			t.Fatalf("a message with MSH-11 %q: %+v; want AR, condition 202, naming processing_id", id, ack)
		}
	}
	// Enhanced mode (MSH-15 set): CR.
	enhanced := strings.Replace(withProcessingID("NOTPRODAL", "T"), "|T|2.5.1\r", "|T|2.5.1|||AL|NE\r", 1)
	if ack := c.Send(enhanced); ack.Code != hl7.CR || ack.ErrorCode != "202" {
		t.Fatalf("an enhanced-mode training message: %+v; want CR, condition 202", ack)
	}
	enginetest.WaitFor(t, "the six messages stored", 10*time.Second, func() bool { return len(e.Messages(t)) >= 6 })
	for _, d := range e.Messages(t) {
		want := storage.MessageRouted
		if !strings.HasPrefix(d.Message.ControlID, "PROD") {
			want = storage.MessageRejected
		}
		if d.Message.Status != want || (want == storage.MessageRejected && (len(d.Queue) != 0 || !strings.Contains(d.Message.Error, "MSH-11"))) {
			t.Fatalf("message %s stored %s with %d queue rows, error %q; want %s", d.Message.ControlID, d.Message.Status, len(d.Queue), d.Message.Error, want)
		}
	}
	if n := rejected.Get() - before; n != 4 {
		t.Fatalf("mf_messages_rejected_total{reason=\"processing_id\"} rose by %d, want 4", n)
	}
}

// A file inbound's processing_id is checked as a listener's: a message of
// another processing ID is kept as rejected, and the file's WARN counts it.
func TestAFileInboundTakesItsProcessingIDOnly(t *testing.T) {
	e, in := startFileInbound(t, "settle_seconds = 0\nprocessing_id = \"P\"")
	rejected := metrics.GetOrCreateCounter(`mf_messages_rejected_total{inbound="drop",reason="processing_id"}`)
	before := rejected.Get()
	drop(t, in, "mixed.hl7", withProcessingID("PROD1", "P")+withProcessingID("TRAIN1", "T"))
	enginetest.WaitFor(t, "mixed.hl7 archived", 10*time.Second, func() bool { return archived(in, "mixed.hl7") })
	got := map[string]string{}
	for _, d := range e.Messages(t) {
		got[d.Message.ControlID] = d.Message.Status
	}
	if got["PROD1"] != storage.MessageRouted || got["TRAIN1"] != storage.MessageRejected {
		t.Fatalf("stored %v; want PROD1 routed, TRAIN1 rejected", got)
	}
	if n := rejected.Get() - before; n != 1 {
		t.Fatalf("mf_messages_rejected_total{inbound=\"drop\",reason=\"processing_id\"} rose by %d, want 1", n)
	}
	if n := logLines(e, `"level":"warn"`, `"file":"mixed.hl7"`, `"rejected":1`, `processing ID (MSH-11)`); n != 1 {
		t.Fatalf("%d WARN lines say mixed.hl7 had a message rejected for its processing ID; want one:\n%s", n, e.Logs.String())
	}
}

// A message the inbound refuses (here its MSH-11, or bytes that are not
// HL7) that the database then refuses too (an operator's trigger on
// mf_messages) is answered AR, as it would be without the trigger: the
// ingest keeps its bytes as rejected without the refused value, and sent
// again it would be refused again. It was answered AE, "not stored, send it
// again", though its bytes were kept: the sender resent it for ever, and
// each resend kept another copy.
func TestARefusedMessageTheStoreRefusesTooIsAnsweredAR(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	cfg := strings.Replace(strings.ReplaceAll(ackConfig, "{{listen}}", addr), "max_message_bytes = 1024\n", "max_message_bytes = 1024\nprocessing_id = \"P\"\n", 1)
	e := enginetest.Start(t, cfg)
	db, err := sql.Open("sqlite", filepath.Join(e.Dir, "mf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TRIGGER operator_audit BEFORE INSERT ON mf_messages WHEN NEW.control_id IN ('TRAIN1', 'BADSEP1')
		BEGIN SELECT RAISE(ABORT, 'refused by an operator''s trigger'); END`); err != nil {
		t.Fatal(err)
	}
	c := dial(t, addr)
	training := withProcessingID("TRAIN1", "T")
	notHL7 := "MSH|^|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01|BADSEP1|P|2.5.1\r" // MSH-2 lacks the other encoding characters
	for range 2 {
		if ack := c.Send(training); ack.Code != hl7.AR || ack.ControlID != "TRAIN1" || ack.ErrorCode != "202" {
			t.Fatalf("a training message the store refuses: %+v; want AR, condition 202, as without the trigger", ack)
		}
		if ack := c.Send(notHL7); ack.Code != hl7.AR || ack.ControlID != "BADSEP1" {
			t.Fatalf("bytes that are not HL7, which the store refuses: %+v; want AR, as without the trigger", ack)
		}
	}
	kept := 0
	for _, d := range e.Messages(t) {
		if d.Message.Status != storage.MessageRejected || d.Message.ControlID != "" || !strings.Contains(d.Message.Error, "refused") {
			t.Fatalf("stored %+v; want each kept as rejected, without its refused control id", d.Message)
		}
		kept++
	}
	if kept != 4 {
		t.Fatalf("%d messages kept; want the 4 sent, once each", kept)
	}
}

// A message refused for its processing ID whose sender asked for no error
// ACK (MSH-15 NE) gets no answer: the log says so at ERROR, with what to do,
// and not "answered AR" (it did, and the operator believed the sender knew).
func TestARefusedMessageWithoutAnAckIsLoggedAsNotAnswered(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	cfg := strings.Replace(strings.ReplaceAll(ackConfig, "{{listen}}", addr), "max_message_bytes = 1024\n", "max_message_bytes = 1024\nprocessing_id = \"P\"\n", 1)
	e := enginetest.Start(t, cfg)
	c := dial(t, addr)
	c.Post(strings.Replace(withProcessingID("TRAINNE1", "T"), "|T|2.5.1\r", "|T|2.5.1|||NE|NE\r", 1))
	// The next message's ACK is the first frame back: none came for TRAINNE1.
	if ack := c.Send(withProcessingID("PROD1", "P")); ack.Code != hl7.AA || ack.ControlID != "PROD1" {
		t.Fatalf("the message after the unanswered one: %+v; want AA for PROD1", ack)
	}
	var line string
	enginetest.WaitFor(t, "the line about TRAINNE1", 10*time.Second, func() bool {
		for _, l := range strings.Split(e.Logs.String(), "\n") {
			if strings.Contains(l, `"control_id":"TRAINNE1"`) && strings.Contains(l, "refused") {
				line = l
				return true
			}
		}
		return false
	})
	if strings.Contains(line, "answered AR") || !strings.Contains(line, `"level":"error"`) || !strings.Contains(line, "not answered") {
		t.Fatalf("no ACK was sent (MSH-15 NE); want an ERROR saying the message was not answered, got:\n%s", line)
	}
}

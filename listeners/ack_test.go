package listeners_test

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
)

func dial(t *testing.T, addr string) *enginetest.Client { return enginetest.Dial(t, addr) }

func adt(id, patient string) string { return enginetest.ADT(id, patient) }

const ackConfig = `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "{{listen}}"
max_message_bytes = 1024

[[outbound]]
name = "out"
type = "file"
directory = "{{dir}}/out"

[[route]]
from = "adt_in"
to = ["out"]
filter = { "MSH-9.1" = "ADT" }
lane_key = "PID-3.1"
`

// Every row of the ACK table (DESIGN §6), while a well-behaved sender on
// another connection keeps getting AA throughout.
func TestAckTable(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, strings.ReplaceAll(ackConfig, "{{listen}}", addr))
	good := dial(t, addr)
	n := 0
	stillWorks := func() {
		t.Helper()
		n++
		id := "GOOD" + string(rune('A'+n))
		if ack := good.Send(adt(id, "P1")); ack.Code != hl7.AA || ack.ControlID != id {
			t.Fatalf("the well-behaved connection got %s for %s (MSA-2 %q)", ack.Code, id, ack.ControlID)
		}
	}
	stillWorks()
	// storedWith is the last stored message whose bytes hold part, or nil.
	storedWith := func(part string) *storage.Message {
		var found *storage.Message
		for _, d := range e.Messages(t) {
			if bytes.Contains(d.Message.Payload, []byte(part)) {
				found = &d.Message
			}
		}
		return found
	}

	t.Run("valid and routed: AA with MSA-2 = MSH-10", func(t *testing.T) {
		ack := dial(t, addr).Send(adt("CTRL1", "P2"))
		if ack.Code != hl7.AA || ack.ControlID != "CTRL1" {
			t.Fatalf("got %+v", ack)
		}
		stillWorks()
	})
	t.Run("enhanced mode (MSH-15 set): CA", func(t *testing.T) {
		msg := strings.Replace(adt("CTRL2", "P2"), "|P|2.5.1\r", "|P|2.5.1|||AL|NE\r", 1)
		if ack := dial(t, addr).Send(msg); ack.Code != hl7.CA || ack.ControlID != "CTRL2" {
			t.Fatalf("got %+v", ack)
		}
		stillWorks()
	})
	// Enhanced mode: MSH-15 says when the sender wants an accept ACK. One it
	// did not ask for it never reads, and would take for the answer to its
	// next message; so the first ACK each connection reads below must be
	// the one for the message that wanted it.
	enhanced := func(id, patient, accept string) string {
		return strings.Replace(adt(id, patient), "|P|2.5.1\r", "|P|2.5.1|||"+accept+"|NE\r", 1)
	}
	t.Run("enhanced mode, MSH-15 NE: stored, no ACK", func(t *testing.T) {
		cl := dial(t, addr)
		cl.Post(enhanced("CTRLNE", "P10", "NE"))
		if ack := cl.Send(enhanced("CTRLAL", "P10", "AL")); ack.Code != hl7.CA || ack.ControlID != "CTRLAL" {
			t.Fatalf("first ACK on the connection: %s for %q; want CA for CTRLAL, none for the NE message", ack.Code, ack.ControlID)
		}
		stillWorks()
	})
	t.Run("enhanced mode, MSH-15 ER: an ACK only when not accepted", func(t *testing.T) {
		cl := dial(t, addr)
		e.Store.FailIngest.Store(true)
		ack := cl.Send(enhanced("CTRLER1", "P11", "ER"))
		e.Store.FailIngest.Store(false)
		if ack.Code != hl7.CE || ack.ControlID != "CTRLER1" {
			t.Fatalf("store failed: %s for %q; want CE for CTRLER1", ack.Code, ack.ControlID)
		}
		cl.Post(enhanced("CTRLER2", "P11", "ER"))
		if ack := cl.Send("PID|1||P11\r"); ack.Code != hl7.AR || ack.ControlID != "" {
			t.Fatalf("first ACK after the accepted ER message: %s for %q; want the AR of the next, unparsable one", ack.Code, ack.ControlID)
		}
		stillWorks()
	})
	t.Run("enhanced mode, MSH-15 SU: an ACK only when accepted", func(t *testing.T) {
		cl := dial(t, addr)
		e.Store.FailIngest.Store(true)
		cl.Post(enhanced("CTRLSU1", "P12", "SU"))
		ack := cl.Send(enhanced("CTRLSU2", "P12", "AL"))
		e.Store.FailIngest.Store(false)
		if ack.Code != hl7.CE || ack.ControlID != "CTRLSU2" {
			t.Fatalf("first ACK on the connection: %s for %q; want CE for CTRLSU2, none for the failed SU message", ack.Code, ack.ControlID)
		}
		// The sender will not resend it: the log must say so, naming it.
		if !strings.Contains(e.Logs.String(), `"control_id":"CTRLSU1","accept_ack_type":"SU"`) {
			t.Fatalf("no log line names the SU message that was not stored:\n%s", e.Logs.String())
		}
		if ack := cl.Send(enhanced("CTRLSU1", "P12", "SU")); ack.Code != hl7.CA || ack.ControlID != "CTRLSU1" {
			t.Fatalf("SU message stored: %s for %q; want CA", ack.Code, ack.ControlID)
		}
		stillWorks()
	})
	t.Run("valid, no route matches: AA, stored unrouted", func(t *testing.T) {
		oru := "MSH|^~\\&|LIS|HOSP|EHR|HOSP|20261121090000||ORU^R01|CTRL3|P|2.5.1\rPID|1||P3\r"
		if ack := dial(t, addr).Send(oru); ack.Code != hl7.AA || ack.ControlID != "CTRL3" {
			t.Fatalf("got %+v", ack)
		}
		stillWorks()
	})
	// An empty frame holds no message: there is nothing to keep. Some
	// senders send one as a keepalive, every few seconds: each was stored
	// as a rejected message and logged at WARN.
	t.Run("empty frame: AR, nothing stored, logged once, connection stays", func(t *testing.T) {
		before := len(e.Messages(t))
		cl := dial(t, addr)
		for _, empty := range []string{"", "\r", "\r\n", "  "} {
			if ack := cl.Send(empty); ack.Code != hl7.AR || ack.ControlID != "" || !strings.Contains(ack.Text+ack.ErrorMessage, "empty") {
				t.Fatalf("empty frame %q: %+v; want AR saying the frame was empty", empty, ack)
			}
		}
		if ack := cl.Send(adt("CTRLEMPTY", "P4")); ack.Code != hl7.AA || ack.ControlID != "CTRLEMPTY" {
			t.Fatalf("the same connection after the empty frames: %+v", ack)
		}
		if after := len(e.Messages(t)); after != before+1 {
			t.Fatalf("%d messages stored for 4 empty frames and one message; want 1", after-before)
		}
		if n := strings.Count(e.Logs.String(), "empty MLLP frame"); n != 1 {
			t.Fatalf("%d log lines for 4 empty frames from one host; want 1 (once a minute)", n)
		}
		stillWorks()
	})
	t.Run("no MSH: AR with the reason, stored rejected, connection stays", func(t *testing.T) {
		cl := dial(t, addr)
		ack := cl.Send("PID|1||P4\rPV1|1|I\r")
		if ack.Code != hl7.AR || !strings.Contains(ack.Text+ack.ErrorMessage, "MSH") {
			t.Fatalf("got %+v", ack)
		}
		if ack := cl.Send(adt("CTRL5", "P4")); ack.Code != hl7.AA {
			t.Fatalf("the same connection after an AR: %+v", ack)
		}
		stillWorks()
	})
	t.Run("bad separators: AR with the reason and the control ID, stored rejected", func(t *testing.T) {
		ack := dial(t, addr).Send("MSH|^|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01|CTRL6|P|2.5.1\r")
		if ack.Code != hl7.AR || !strings.Contains(strings.ToLower(ack.Text+ack.ErrorMessage), "separator") ||
			ack.ErrorCode != "102" { // data type error: MSH-2 holds the wrong kind of data
			t.Fatalf("got %+v", ack)
		}
		// MSH-1 is good, so MSH-10 is found by it alone: a sender that
		// matches ACKs by MSA-2 gets its answer.
		if ack.ControlID != "CTRL6" {
			t.Fatalf("MSA-2 %q, want the message's MSH-10 CTRL6", ack.ControlID)
		}
		if m := storedWith("|CTRL6|"); m == nil || m.Status != storage.MessageRejected || m.ControlID != "CTRL6" {
			t.Fatal("the message with bad separators is not stored rejected with its control ID CTRL6")
		}
		stillWorks()
	})
	t.Run("a batch in one frame: AR 100 naming FHS, stored rejected, connection stays", func(t *testing.T) {
		cl := dial(t, addr)
		ack := cl.Send("FHS|^~\\&|EPIC\rBHS|^~\\&|EPIC\r" + adt("CTRLB", "PB") + "BTS|1\rFTS|1\r")
		if ack.Code != hl7.AR || ack.ErrorCode != "100" || ack.ControlID != "" ||
			ack.ErrorMessage != `hl7: first segment is not MSH: it starts with "FHS"` {
			t.Fatalf("got %+v", ack)
		}
		if ack := cl.Send(adt("CTRLB2", "PB")); ack.Code != hl7.AA {
			t.Fatalf("the same connection after a batch: %+v", ack)
		}
		stillWorks()
	})
	// Two messages glued in one frame were stored, routed and delivered as
	// one, in the first one's lane, and only the first was acknowledged.
	t.Run("two messages in one frame: AR 100 naming the second MSH, stored rejected, connection stays", func(t *testing.T) {
		cl := dial(t, addr)
		ack := cl.Send(adt("CTRLD1", "PD") + adt("CTRLD2", "PE"))
		if ack.Code != hl7.AR || ack.ErrorCode != "100" || ack.ControlID != "CTRLD1" ||
			!strings.Contains(ack.ErrorMessage, "second message") {
			t.Fatalf("got %+v", ack)
		}
		if m := storedWith("|CTRLD2|"); m == nil || m.Status != storage.MessageRejected || m.ControlID != "CTRLD1" {
			t.Fatal("the frame of two messages is not stored rejected")
		}
		if ack := cl.Send(adt("CTRLD3", "PD")); ack.Code != hl7.AA {
			t.Fatalf("the same connection after two messages in one frame: %+v", ack)
		}
		stillWorks()
	})
	t.Run("garbage bytes outside a frame: AR, then closed", func(t *testing.T) {
		cl := dial(t, addr)
		ack, err := cl.Raw([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		if err != nil || ack.Code != hl7.AR {
			t.Fatalf("got %+v, %v", ack, err)
		}
		if !cl.Closed() {
			t.Fatal("connection still open after bytes outside a frame")
		}
		stillWorks()
	})
	t.Run("larger than max_message_bytes: AR, then closed, nothing stored", func(t *testing.T) {
		cl := dial(t, addr)
		big := adt("CTRL7", "P7") + "NTE|1||" + strings.Repeat("x", 2000) + "\r"
		frame, _ := hl7.AppendFrame(nil, []byte(big))
		ack, err := cl.Raw(frame)
		if err != nil || ack.Code != hl7.AR || !strings.Contains(ack.Text+ack.ErrorMessage, "1024") ||
			ack.ErrorCode != "104" { // value too long, not 100 (segment sequence error)
			t.Fatalf("got %+v, %v", ack, err)
		}
		if !cl.Closed() {
			t.Fatal("connection still open after an oversize frame")
		}
		stillWorks()
	})
	t.Run("store failed: AE, nothing stored; AA again once it is back", func(t *testing.T) {
		cl := dial(t, addr)
		e.Store.FailIngest.Store(true)
		ack := cl.Send(adt("CTRL8", "P8"))
		if ack.Code != hl7.AE || ack.ControlID != "CTRL8" {
			t.Fatalf("got %+v", ack)
		}
		e.Store.FailIngest.Store(false)
		if ack := cl.Send(adt("CTRL8", "P8")); ack.Code != hl7.AA {
			t.Fatalf("after the store came back: %+v", ack)
		}
		stillWorks()
	})
	t.Run("refused by the store: AR, its bytes kept as rejected", func(t *testing.T) {
		refuse := "CTRL9"
		e.Store.RefuseControlID.Store(&refuse)
		defer e.Store.RefuseControlID.Store(nil)
		ack := dial(t, addr).Send(adt("CTRL9", "P9"))
		if ack.Code != hl7.AR || ack.ControlID != "CTRL9" || !strings.Contains(ack.Text+ack.ErrorMessage, "refused") {
			t.Fatalf("got %+v", ack)
		}
		stillWorks()
	})
	t.Run("not HL7 and the store failed: AE, not AR (its bytes were not kept)", func(t *testing.T) {
		cl := dial(t, addr)
		e.Store.FailIngest.Store(true)
		ack := cl.Send("PID|1||P13\rPV1|1|I\r")
		e.Store.FailIngest.Store(false)
		if ack.Code != hl7.AE {
			t.Fatalf("got %+v; want AE: the sender must send it again", ack)
		}
		if ack := cl.Send("PID|1||P13\rPV1|1|I\r"); ack.Code != hl7.AR {
			t.Fatalf("sent again once the store was back: %+v; want AR", ack)
		}
		stillWorks()
	})

	// What was stored: every accepted message, the seven rejects (the
	// batch and the glued pair among them), nothing of the oversize frame or
	// the failed commits.
	status := map[string]int{}
	controls := map[string]int{}
	for _, d := range e.Messages(t) {
		status[d.Message.Status]++
		controls[d.Message.ControlID]++
		if d.Message.Status == storage.MessageRejected && (d.Message.Error == "" || len(d.Message.Payload) == 0) {
			t.Errorf("rejected message stored without its reason or bytes: %+v", d.Message)
		}
	}
	if status[storage.MessageRejected] != 7 || status[storage.MessageUnrouted] != 1 {
		t.Fatalf("stored statuses %v; want 7 rejected, 1 unrouted", status)
	}
	if controls["CTRL7"] != 0 || controls["CTRL8"] != 1 {
		t.Fatalf("oversize stored %d times, the failed-then-resent message %d times; want 0 and 1", controls["CTRL7"], controls["CTRL8"])
	}
	for _, id := range []string{"CTRLNE", "CTRLER2", "CTRLSU1"} {
		if controls[id] != 1 {
			t.Errorf("%s, which got no ACK or only one after a failure, stored %d times; want 1", id, controls[id])
		}
	}
}

// A message in Latin-1 (common in HL7 v2: MSH-18 "8859/1") is accepted, its
// ACK echoing its control id byte for byte, and its text columns are stored
// as valid UTF-8, each byte that is not replaced by U+FFFD: PostgreSQL
// refuses anything else, and a message stored as it came there failed its
// whole ingest batch (AE to every sender in it, forever to its own). The
// payload stays as received.
func TestALatin1MessageIsStoredWithValidText(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, strings.ReplaceAll(ackConfig, "{{listen}}", addr))
	msg := adt("L\xc41", "M\xdcLLER")
	if ack := dial(t, addr).Send(msg); ack.Code != hl7.AA || ack.ControlID != "L\xc41" {
		t.Fatalf("ACK %+v; want AA for control id L\\xc41", ack)
	}
	var found bool
	for _, d := range e.Messages(t) {
		if !bytes.Equal(d.Message.Payload, []byte(msg)) {
			continue
		}
		found = true
		if d.Message.ControlID != "L\uFFFD1" || len(d.Queue) != 1 || d.Queue[0].Lane != "out/M\uFFFDLLER" {
			t.Fatalf("stored control id %q, queue %+v; want L\uFFFD1 in lane out/M\uFFFDLLER", d.Message.ControlID, d.Queue)
		}
	}
	if !found {
		t.Fatal("the message was not stored as received")
	}
}

// A message in BIG-5 (MSH-18), whose sending facility 臺大醫院 ends in 院,
// B0 7C, the second byte a field separator's, is read as BIG-5 reads it:
// accepted (CA: its MSH-15 says AL) naming its own control id, routed by
// its message type and laned by its patient. Split byte by byte, every
// later MSH field moved by one: AA naming MSH-9 as the control id, and the
// message stored unrouted, never delivered.
func TestABig5MessageIsReadByItsCharacters(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, strings.ReplaceAll(ackConfig, "{{listen}}", addr))
	msg := "MSH|^~\\&|HIS|\xbb\x4f\xa4\x6a\xc2\xe5\xb0\x7c|LIS|LAB|20261121090000||ADT^A01^ADT_A01|CTRLB5|P|2.5.1|||AL|NE||BIG-5\r" +
		"PID|1||P\xb3\x5c7^^^HOSP||\xb3\x5c^\xa5\x5c\r"
	if ack := dial(t, addr).Send(msg); ack.Code != hl7.CA || ack.ControlID != "CTRLB5" {
		t.Fatalf("ACK %+v; want CA for CTRLB5", ack)
	}
	var found bool
	for _, d := range e.Messages(t) {
		if !bytes.Equal(d.Message.Payload, []byte(msg)) {
			continue
		}
		found = true
		// The lane key is stored as UTF-8, each byte that is not U+FFFD.
		if d.Message.ControlID != "CTRLB5" || d.Message.Status == storage.MessageUnrouted || len(d.Queue) != 1 || d.Queue[0].Lane != "out/P\uFFFD\\7" {
			t.Fatalf("stored control id %q, status %s, queue %+v; want CTRLB5, routed, in lane out/P\uFFFD\\7", d.Message.ControlID, d.Message.Status, d.Queue)
		}
	}
	if !found {
		t.Fatal("the message was not stored as received")
	}
}

// A message the store refuses (kept as rejected) whose sender asked for no
// error ACK (MSH-15 NE) is logged at ERROR as refused: the line used to say
// it was not stored and to ask the sender to resend it, which the store
// would refuse again.
func TestARefusedMessageWithoutAnErrorAckIsLoggedAsRefused(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, strings.ReplaceAll(ackConfig, "{{listen}}", addr))
	refuse := "CTRLNE9"
	e.Store.RefuseControlID.Store(&refuse)
	cl := dial(t, addr)
	cl.Post(strings.Replace(adt("CTRLNE9", "P9"), "|P|2.5.1\r", "|P|2.5.1|||NE|NE\r", 1))
	var line string
	enginetest.WaitFor(t, "the ERROR line about CTRLNE9", 10*time.Second, func() bool {
		for _, l := range strings.Split(e.Logs.String(), "\n") {
			if strings.Contains(l, `"level":"error"`) && strings.Contains(l, `"control_id":"CTRLNE9"`) {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, "refused by the store") || strings.Contains(line, "resend") {
		t.Fatalf("ERROR line %s; want it to say the store refused the message, not to ask for a resend", line)
	}
}

// mf_messages_rejected_total{reason="parse"} counts input that is not HL7
// v2 and was kept as rejected (answered AR). Input that could not be kept,
// because the store failed, is answered AE and sent again: it was counted
// as a parse rejection at each try, and never as a store failure, so a
// database outage showed as a sender sending garbage.
func TestAnUnparsableMessageNotStoredIsCountedAsAStoreFailure(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	cfg := strings.NewReplacer("{{listen}}", addr, `"adt_in"`, `"count_in"`).Replace(ackConfig)
	e := enginetest.Start(t, cfg)
	parse, store := `mf_messages_rejected_total{inbound="count_in",reason="parse"}`, `mf_messages_rejected_total{inbound="count_in",reason="store"}`
	parse0, store0 := counterValue(t, parse), counterValue(t, store)
	cl := dial(t, addr)
	e.Store.FailIngest.Store(true)
	ack := cl.Send("PID|1||P13\rPV1|1|I\r")
	e.Store.FailIngest.Store(false)
	if ack.Code != hl7.AE {
		t.Fatalf("got %+v; want AE", ack)
	}
	if p, s := counterValue(t, parse)-parse0, counterValue(t, store)-store0; p != 0 || s != 1 {
		t.Fatalf("answered AE, nothing stored: parse +%v, store +%v; want +0 and +1", p, s)
	}
	if ack := cl.Send("PID|1||P13\rPV1|1|I\r"); ack.Code != hl7.AR {
		t.Fatalf("sent again: %+v; want AR", ack)
	}
	if p, s := counterValue(t, parse)-parse0, counterValue(t, store)-store0; p != 1 || s != 1 {
		t.Fatalf("then answered AR, stored rejected: parse +%v, store +%v; want +1 and +1", p, s)
	}
}

// Two messages glued in one frame (hl7.ErrSecondMSH) have a first MSH that
// is whole: the frame is answered as any message with a good header that
// the inbound refuses is. It was answered as bytes with no header at all:
// MSH-3 "MF", MSH-5/6 empty, version 2.5 whatever the sender's, AR in
// enhanced mode, AE where CE was due, and an answer even to a sender that
// asked for none (MSH-15 NE), which it never reads and takes for the answer
// to its next message.
func TestTwoMessagesInOneFrameAreAnsweredByTheFirstOnesHeader(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, strings.ReplaceAll(ackConfig, "{{listen}}", addr))
	// glued is two messages in one payload, the first of version 2.3 in
	// Latin-1 (MSH-18) with MSH-15 accept, from SENDAPP at SENDFAC.
	glued := func(id, accept string) string {
		return "MSH|^~\\&|SENDAPP|SENDFAC|RECVAPP|RECVFAC|20261121090000||ADT^A01|" + id + "|P|2.3|||" + accept + "|||8859/1\r" +
			"PID|1||G1^^^HOSP^MR\r" + adt(id+"B", "G2")
	}

	t.Run("original mode: AR 100 from the message's receiver, in its version and character set", func(t *testing.T) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if err := hl7.WriteFrame(c, []byte(glued("GLUED1", ""))); err != nil {
			t.Fatal(err)
		}
		raw, err := hl7.NewFrameReader(c, 1<<20).ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		m, err := hl7.Parse(raw)
		if err != nil {
			t.Fatalf("the ACK does not parse: %v\n%q", err, raw)
		}
		for path, want := range map[string]string{
			"MSH-3": "RECVAPP", "MSH-4": "RECVFAC", "MSH-5": "SENDAPP", "MSH-6": "SENDFAC",
			"MSH-9":  "ACK^A01", // before v2.3.1: no third component
			"MSH-12": "2.3", "MSH-18": "8859/1",
			"MSA-1": "AR", "MSA-2": "GLUED1",
			"ERR-1.4.1": "100", // the pre-v2.5 ERR layout
		} {
			if got, _ := m.Field(path); got != want {
				t.Errorf("%s %q, want %q\n%q", path, got, want, raw)
			}
		}
		if got, _ := m.Field("ERR-1.4.2"); !strings.Contains(got, "second message") {
			t.Errorf("ERR-1.4.2 %q does not say a second message is in the frame", got)
		}
	})
	t.Run("enhanced mode, MSH-15 AL: CR", func(t *testing.T) {
		ack := dial(t, addr).Send(glued("GLUED2", "AL"))
		if ack.Code != hl7.CR || ack.ControlID != "GLUED2" || ack.ErrorCode != "100" {
			t.Fatalf("got %+v; want CR 100 for GLUED2", ack)
		}
	})
	t.Run("enhanced mode, MSH-15 NE: no ACK, the next message's comes first", func(t *testing.T) {
		cl := dial(t, addr)
		cl.Post(glued("GLUED3", "NE"))
		if ack := cl.Send(adt("AFTERNE", "G3")); ack.Code != hl7.AA || ack.ControlID != "AFTERNE" {
			t.Fatalf("first ACK on the connection: %s for %q; want AA for AFTERNE, none for the NE frame", ack.Code, ack.ControlID)
		}
	})
	t.Run("store failed: AE, CE in enhanced mode", func(t *testing.T) {
		cl := dial(t, addr)
		e.Store.FailIngest.Store(true)
		original := cl.Send(glued("GLUED4", ""))
		enhanced := cl.Send(glued("GLUED5", "ER"))
		e.Store.FailIngest.Store(false)
		if original.Code != hl7.AE || original.ControlID != "GLUED4" || original.ErrorCode != "207" {
			t.Errorf("original mode: %+v; want AE 207 for GLUED4", original)
		}
		if enhanced.Code != hl7.CE || enhanced.ControlID != "GLUED5" || enhanced.ErrorCode != "207" {
			t.Errorf("enhanced mode: %+v; want CE 207 for GLUED5", enhanced)
		}
	})

	// Each frame answered AR or CR, or not at all, is kept as rejected,
	// whole, under its first message's control ID; none of those the store
	// failed on.
	kept := map[string]bool{}
	for _, d := range e.Messages(t) {
		m := d.Message
		if !strings.HasPrefix(m.ControlID, "GLUED") {
			continue
		}
		if m.Status != storage.MessageRejected || !strings.Contains(m.Error, "second message") || !bytes.Contains(m.Payload, []byte("|"+m.ControlID+"B|")) {
			t.Errorf("frame %s stored %s, error %q, %d bytes; want rejected, whole, saying why", m.ControlID, m.Status, m.Error, len(m.Payload))
		}
		kept[m.ControlID] = true
	}
	if !kept["GLUED1"] || !kept["GLUED2"] || !kept["GLUED3"] || kept["GLUED4"] || kept["GLUED5"] {
		t.Fatalf("kept %v; want GLUED1-3, not GLUED4-5 (the store failed)", kept)
	}
	// The sender of the NE frame is not told: the log must say so.
	if !strings.Contains(e.Logs.String(), `"control_id":"GLUED3"`) || !strings.Contains(e.Logs.String(), "not answered") {
		t.Fatalf("no log line says GLUED3 was refused and not answered:\n%s", e.Logs.String())
	}
}

package lanes_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/storage"
)

func send(t *testing.T, addr string, msgs ...string) {
	t.Helper()
	cl := enginetest.Dial(t, addr)
	for _, m := range msgs {
		if ack := cl.Send(m); ack.Code != hl7.AA {
			t.Fatalf("ack %+v", ack)
		}
	}
}

func msg(id, patient, note string) string {
	return "MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01|" + id + "|P|2.5.1\r" +
		"PID|1||" + patient + "^^^HOSP^MR||DOE^JANE\rNTE|1||" + note + "\r"
}

// A destination that rejects a message (a permanent failure) with
// on_exhausted = "block": that lane stops at the message and says so, other
// lanes go on; an operator's retry sends it again and the lane resumes in
// order.
func TestRejectedHeadBlocksItsLaneUntilReleased(t *testing.T) {
	dest := enginetest.StartHTTPDestination(t)
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "`+addr+`"

[[outbound]]
name = "emr"
type = "http"
url = "`+dest.URL+`"
retry_base_seconds = 0.1
retry_max_seconds = 0.2

[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "PID-3.1"
`)
	send(t, addr, msg("A1", "P1", "ok"), msg("A2", "P1", "POISON"), msg("A3", "P1", "ok"),
		msg("B1", "P2", "ok"), msg("B2", "P2", "ok"))

	var blocked storage.LaneSummary
	enginetest.WaitFor(t, "lane emr/P1 to be blocked and P2 delivered", 10*time.Second, func() bool {
		lanes, err := e.Store.QueueLanes(context.Background(), storage.QueueLanesParams{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lanes {
			if l.Lane == "emr/P1" && l.Blocked() {
				blocked = l
			}
		}
		return blocked.Lane != "" && len(dest.Received()) == 3
	})
	if a, b := lane(dest.Received(), "A"), lane(dest.Received(), "B"); a != "A1" || b != "B1,B2" {
		t.Fatalf("delivered %s and %s; want A1 (A3 waits behind the blocked A2) and B1,B2", a, b)
	}
	if blocked.Depth != 2 || !strings.Contains(blocked.Head.LastError, "400") {
		t.Fatalf("blocked lane %+v; want depth 2 and the destination's refusal as its error", blocked)
	}

	// Nothing moves while the lane is blocked, through several rescans.
	time.Sleep(2500 * time.Millisecond)
	if n := len(dest.Received()); n != 3 {
		t.Fatalf("a blocked lane delivered: %v", dest.Received())
	}

	dest.Reject.Store(false)
	if _, err := e.Store.QueueRelease(context.Background(), storage.QueueReleaseParams{ID: blocked.Head.ID}); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "the released lane to deliver A2 then A3", 10*time.Second, func() bool {
		return len(dest.Received()) == 5
	})
	if a := lane(dest.Received(), "A"); a != "A1,A2,A3" {
		t.Fatalf("lane P1 delivered %s; want A1,A2,A3", a)
	}
}

// lane returns, in delivery order, the control ids starting with prefix.
func lane(got []string, prefix string) string {
	var out []string
	for _, id := range got {
		if strings.HasPrefix(id, prefix) {
			out = append(out, id)
		}
	}
	return strings.Join(out, ",")
}

// A message that came in with MSH-15 NE or ER goes out as it came, and asks
// the destination for no ACK of its acceptance; an MLLP destination in
// enhanced mode (as mf's own listener) sends none. The lane waited for one,
// timed out, sent the message again and again, and nothing behind it moved.
// Now each is delivered once written, in order, and the lane goes on; the
// destination's refusal of an ER message (CR, which ER asks for) is logged
// at WARN by the destination's sender, without the message.
func TestAnMLLPDestinationIsNotWaitedOnForAnAckMSH15AsksNoneOf(t *testing.T) {
	var mu sync.Mutex
	var received []string
	dest := enginetest.ServeTCP(t, func(c net.Conn) {
		fr := hl7.NewFrameReader(c, 1<<20)
		for {
			p, err := fr.ReadFrame()
			if err != nil {
				return
			}
			m, err := hl7.Parse(p)
			if err != nil {
				return
			}
			mu.Lock()
			received = append(received, m.ControlID())
			mu.Unlock()
			outcome := hl7.Accept
			if m.ControlID() == "ER-BAD" {
				outcome = hl7.Reject
			}
			if code := hl7.AcceptCode(m, outcome); hl7.ShouldAck(m, code) {
				_ = hl7.WriteFrame(c, hl7.Ack(m, code, ""))
			}
		}
	})
	got := func() string { mu.Lock(); defer mu.Unlock(); return strings.Join(received, ",") }
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "`+addr+`"

[[outbound]]
name = "emr"
type = "mllp"
address = "`+dest+`"
timeout_seconds = 2
retry_base_seconds = 0.1
retry_max_seconds = 0.2

[[route]]
from = "adt_in"
to = ["emr"]
`)
	asking := func(id, ackType string) string {
		return strings.Replace(enginetest.ADT(id, "P1"), "\r", "|||"+ackType+"\r", 1)
	}
	cl := enginetest.Dial(t, addr)
	for _, m := range []struct{ id, ackType string }{{"NE1", "NE"}, {"ER-BAD", "ER"}, {"ER-OK", "ER"}, {"NE2", "NE"}} {
		cl.Post(asking(m.id, m.ackType)) // mf's listener answers them as they ask: not at all
	}
	if ack := cl.Send(asking("AL1", "AL")); ack.Code != hl7.CA {
		t.Fatalf("ack %+v", ack)
	}
	enginetest.WaitFor(t, "AL1 delivered", 10*time.Second, func() bool { return strings.HasSuffix(got(), "AL1") })
	time.Sleep(500 * time.Millisecond) // a message sent again would come now
	if g := got(); g != "NE1,ER-BAD,ER-OK,NE2,AL1" {
		t.Fatalf("the destination got %s; want NE1,ER-BAD,ER-OK,NE2,AL1, once each", g)
	}
	enginetest.WaitFor(t, "every row done", 10*time.Second, func() bool {
		lanes, err := e.Store.QueueLanes(context.Background(), storage.QueueLanesParams{})
		return err == nil && len(lanes) == 0
	})
	var warned string
	for _, line := range strings.Split(e.Logs.String(), "\n") {
		if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "refused a message already counted delivered") {
			warned += line
		}
	}
	if !strings.Contains(warned, `"destination":"emr"`) || !strings.Contains(warned, `"control_id":"ER-BAD"`) || strings.Count(warned, "refused a message") != 1 {
		t.Errorf("want one WARN of the destination's refusal of ER-BAD, got %q", warned)
	}
	if strings.Contains(warned, "DOE") {
		t.Errorf("the WARN quotes the message: %s", warned)
	}
}

// An operator's resend (POST /messages/{id}/resend) queues a message again
// at the tail of its lane, from any node: the lanes hear of it only through
// the queue's version, at their next rescan. A lane delivering at the time
// knew the newest row of its lane from the ingest, stopped once it had
// delivered that one, and left the resent row, newer, to the next full
// rescan (FullRescanInterval, 30 s). Now a rescan that sees the queue's
// version moved tells each running lane to look for a next row, and the
// resent message arrives at the MLLP destination right after the rows
// queued before it in its lane.
func TestAResentMessageArrivesAfterTheRowsQueuedBeforeIt(t *testing.T) {
	var mu sync.Mutex
	var received []string
	release := make(chan struct{})
	first := true
	dest := enginetest.ServeTCP(t, func(c net.Conn) {
		fr := hl7.NewFrameReader(c, 1<<20)
		for {
			p, err := fr.ReadFrame()
			if err != nil {
				return
			}
			m, err := hl7.Parse(p)
			if err != nil {
				return
			}
			mu.Lock()
			received = append(received, m.ControlID())
			hold := first
			first = false
			mu.Unlock()
			if hold { // the lane is busy with its head while the resend is made
				<-release
			}
			_ = hl7.WriteFrame(c, hl7.Ack(m, hl7.AA, ""))
		}
	})
	got := func() string { mu.Lock(); defer mu.Unlock(); return strings.Join(received, ",") }
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "`+addr+`"

[[outbound]]
name = "lab"
type = "mllp"
address = "`+dest+`"
timeout_seconds = 30

[[route]]
from = "adt_in"
to = ["lab"]
lane_key = "PID-3.1"
`)
	send(t, addr, msg("A1", "P1", "first"), msg("A2", "P1", "second"), msg("A3", "P1", "third"))
	enginetest.WaitFor(t, "A1 at the destination, unanswered", 10*time.Second, func() bool { return got() == "A1" })

	ctx := context.Background()
	ids, err := e.Store.MessageResend(ctx, storage.MessageResendParams{MessageID: 1, Deliveries: []storage.Delivery{{Destination: "lab", Lane: "lab/P1"}}})
	if err != nil || len(ids) != 1 {
		t.Fatalf("resend: %v %v", ids, err)
	}
	moved, err := e.Store.Store.ConfigVersionRead(ctx, storage.ConfigVersionReadParams{Name: storage.QueueVersionName})
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "a rescan to list the lanes after the resend", 10*time.Second, func() bool { return e.Store.LanesListedAt() >= moved })
	close(release)
	// Well inside FullRescanInterval: only the rescan that saw the resend
	// can have told the lane of it.
	enginetest.WaitFor(t, "A1 again, after A2 and A3", lanes.FullRescanInterval*2/3, func() bool { return got() == "A1,A2,A3,A1" })
}

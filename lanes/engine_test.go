package lanes_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
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
		lanes, err := e.Store.QueueLanes(context.Background())
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
	if err := e.Store.QueueRelease(context.Background(), storage.QueueReleaseParams{ID: blocked.Head.ID}); err != nil {
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

package listeners_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
)

// A clean stop (SIGTERM, a reload) stores and answers the messages in hand,
// and only then closes its port. Two are in hand: one in the commit under
// way, one queued behind it for the next (its ingest must not turn it away
// as the graph stops). The test plays a load balancer that checks the port every
// 10 ms and cuts its sessions to a node whose check fails (HAProxy's
// on-marked-down shutdown-sessions, as README advises): the sender's ACK
// must be on its connection by the time the port closes. If the port closed
// first, the balancer would cut the connection between the message's commit
// and its ACK, and the sender would send it again to the next primary,
// which would deliver it a second time.
func TestACleanStopAnswersTheMessageInHandBeforeItsPortCloses(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, hostileConfig(addr, ""))
	cl := dial(t, addr)
	if ack := cl.Send(adt("BEFORE", "P1")); ack.Code != hl7.AA {
		t.Fatalf("first message: %s, want AA", ack.Code)
	}

	queued := dial(t, addr)
	received := metrics.GetOrCreateCounter(`mf_messages_received_total{inbound="adt_in"}`)
	release := e.Store.HoldIngest()
	defer release()
	cl.Post(adt("INHAND", "P1"))
	enginetest.WaitFor(t, "the message's commit to be in hand", 10*time.Second, func() bool { return e.Store.IngestsHeld() > 0 })
	before := received.Get()
	queued.Post(adt("QUEUED", "P2"))
	enginetest.WaitFor(t, "the second message to be read", 10*time.Second, func() bool { return received.Get() > before })
	stopped := e.Stop()
	enginetest.WaitFor(t, "the clean stop to begin", 10*time.Second, func() bool { return !e.Status().Leader })

	portOpen := func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	// The balancer's checks while the commit is held: the port must stay
	// open, however long the listener has been stopping.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !portOpen() {
			// The balancer cuts the session now: whatever is not on the
			// sender's connection yet never reaches it.
			_, err := cl.ReadAck(100 * time.Millisecond)
			t.Fatalf("the port closed while a message's commit was in hand: a load balancer cuts the sender's connection before its ACK (read: %v); the sender sends it again to the next primary", err)
		}
	}
	release()
	deadline := time.Now().Add(10 * time.Second)
	for portOpen() {
		if time.Now().After(deadline) {
			t.Fatal("the port was still open 10 s after the message in hand was committed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The port is closed: the balancer cuts the session; the ACK must be on
	// the connection already.
	ack, err := cl.ReadAck(100 * time.Millisecond)
	if err != nil {
		t.Fatalf("no ACK on the sender's connection when the port closed: %v", err)
	}
	if ack.Code != hl7.AA || ack.ControlID != "INHAND" {
		t.Fatalf("ACK %s for %q, want AA for INHAND", ack.Code, ack.ControlID)
	}
	ack, err = queued.ReadAck(100 * time.Millisecond)
	if err != nil {
		t.Fatalf("no ACK for the message queued behind it when the port closed: %v", err)
	}
	if ack.Code != hl7.AA || ack.ControlID != "QUEUED" {
		t.Fatalf("ACK %s for %q (%s), want AA for QUEUED: the node could store it, and turned it away", ack.Code, ack.ControlID, ack.Text)
	}
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the engine did not stop within 30 s")
	}
	// The listener stopped before the rest of the graph, not told to stop
	// twice: a second stop reached it dead, and protoactor logged a dead
	// letter at every clean stop.
	if strings.Contains(e.Logs.String(), "DeadLetter") {
		t.Fatalf("the stop logged a dead letter:\n%s", e.Logs.String())
	}
}

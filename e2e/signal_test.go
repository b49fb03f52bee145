package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
)

// A second SIGINT while mf drains ends it at once, by the signal, as an
// operator pressing Ctrl-C again expects. The first one stops the
// listeners and lets the delivery in hand finish, here one that a
// destination never answers (up to the 30 s --drain-timeout). Before, mf
// kept catching signals until it returned: the second one was swallowed,
// and mf waited out the drain and exited 0.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	e := startWithADeliveryInHand(t)

	e.signal(syscall.SIGINT)
	waitFor(t, "mf to log that it is stopping", 30*time.Second, func() bool {
		return strings.Contains(e.logs.String(), `"message":"stopping: `)
	})
	e.signal(syscall.SIGINT)
	select {
	case <-e.exited:
	case <-time.After(90 * time.Second):
		t.Fatal("mf still runs 90 s after a second SIGINT")
	}
	ws := e.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Fatalf("after a second SIGINT during the drain mf ended with %v, not by the signal: it waited out the drain", e.cmd.ProcessState)
	}
	if !strings.Contains(e.logs.String(), "a second SIGINT, SIGTERM or SIGHUP stops at once") {
		t.Errorf("the first signal's log line does not say that a second one stops at once")
	}
}

// A stop that waits for a delivery in hand says so, once the wait has lasted
// a moment: the node has closed its MLLP ports and keeps its lease (in a
// cluster no other node takes over before it resigns), so no node accepts
// messages until the delivery ends or the drain timeout does. Before, the
// log went silent from "stopping" to "graph stopped", 20 s in the audit with
// a destination that never answered, while partners were refused by every
// node.
func TestAStopWaitingForADeliveryInHandSaysSo(t *testing.T) {
	t.Parallel()
	e := startWithADeliveryInHand(t)
	e.signal(syscall.SIGTERM)
	waitFor(t, "mf to say that its stop waits for the deliveries in hand", 20*time.Second, func() bool {
		return strings.Contains(e.logs.String(), "waiting for the deliveries in hand to finish")
	})
	if line := grepLines(e.logs.String(), "waiting for the deliveries in hand to finish"); !strings.Contains(line, `"level":"warn"`) || !strings.Contains(line, `"drain_timeout"`) {
		t.Errorf("the line is not a WARN with the drain timeout: %s", line)
	}
	e.signal(syscall.SIGTERM) // the second one ends the drain
	<-e.exited
}

// startWithADeliveryInHand starts a single node whose destination never
// answers while the test runs, and returns it once a delivery is in hand.
// The delivery timeout (50 s) is above the drain timeout (30 s): the
// delivery in hand outlasts the drain.
func startWithADeliveryInHand(t *testing.T) *engine {
	t.Helper()
	dest := startReceiver(t, "")
	inHand, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	dest.answer = func(received) string {
		inHand <- struct{}{}
		<-release // never answers while the test runs
		return ""
	}
	e := startEngine(t, strings.Replace(singleNode(dest.addr(), ""), "timeout_seconds = 5", "timeout_seconds = 50", 1))
	if ack, err := enginetest.Dial(t, e.listen).TrySend(adt("HANG", "P1")); err != nil || ack.Code != "AA" {
		t.Fatalf("send: %+v %v", ack, err)
	}
	select {
	case <-inHand:
	case <-time.After(30 * time.Second):
		t.Fatal("the delivery never started")
	}
	return e
}

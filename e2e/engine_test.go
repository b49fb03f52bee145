package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
)

// singleNode is a config template: one MLLP inbound, one MLLP destination,
// lanes by patient.
func singleNode(dest, extra string) string {
	return `
[store]
backend = "sqlite"
path = "mf.db"

[api]
listen = "` + freePortNoT() + `"

[[inbound]]
name = "adt_in"
type = "mllp"
listen = "{{listen}}"

[[outbound]]
name = "lab"
type = "mllp"
address = "` + dest + `"
timeout_seconds = 5
retry_base_seconds = 0.2
retry_max_seconds = 1
` + extra + `

[[route]]
from = "adt_in"
to = ["lab"]
lane_key = "PID-3.1"
`
}

func freePortNoT() string {
	addr, err := reservedAddr()
	if err != nil {
		panic(err)
	}
	return addr
}

// load is a set of messages over `patients` lanes, each lane sent by one
// connection only, so that a lane's order is its send order.
type load struct {
	n, patients, conns int
	pos                map[string]int // control id → position in its lane
	mu                 sync.Mutex
	acked              map[string]bool
	codes              map[string]int
}

func newLoad(n, patients, conns int) *load {
	l := &load{n: n, patients: patients, conns: conns, pos: map[string]int{}, acked: map[string]bool{}, codes: map[string]int{}}
	next := map[int]int{}
	for i := 0; i < n; i++ {
		p := i % patients
		l.pos[controlID(i)] = next[p]
		next[p]++
	}
	return l
}

func controlID(i int) string { return fmt.Sprintf("M%05d", i) }
func patient(p int) string   { return fmt.Sprintf("P%03d", p) }

// send runs the load: connection c sends, in order, the messages of the
// patients p with p % conns == c, each after the previous one's ACK. A
// connection stops at its first error (the engine was killed).
func (l *load) send(t testing.TB, addr string) {
	var wg sync.WaitGroup
	for c := 0; c < l.conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := enginetest.Dial(t, addr)
			for i := 0; i < l.n; i++ {
				p := i % l.patients
				if p%l.conns != c {
					continue
				}
				ack, err := cl.TrySend(adt(controlID(i), patient(p)))
				if err != nil {
					return
				}
				l.mu.Lock()
				l.codes[string(ack.Code)]++
				if ack.Code == "AA" && ack.ControlID == controlID(i) {
					l.acked[controlID(i)] = true
				}
				l.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func (l *load) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// allDelivered reports whether every acked message reached dest.
func (l *load) allDelivered(dest *receiver) bool {
	got := map[string]bool{}
	for _, r := range dest.received() {
		got[r.ControlID] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.acked {
		if !got[id] {
			return false
		}
	}
	return true
}

// 1,000 messages over 4 connections with 10 lane keys reach an MLLP
// destination: every one ACKed AA, every one delivered, each lane in order.
func TestLoadDeliveredInLaneOrder(t *testing.T) {
	t.Parallel()
	dest := startReceiver(t, "")
	e := startEngine(t, singleNode(dest.addr(), ""))
	l := newLoad(1000, 10, 4)
	l.send(t, e.listen)
	if len(l.acked) != 1000 || l.codes["AA"] != 1000 {
		t.Fatalf("acked %d of 1000 (codes %v)", len(l.acked), l.codes)
	}
	waitFor(t, "all 1000 messages to be delivered", 60*time.Second, func() bool { return l.allDelivered(dest) })
	lanes := checkLanes(t, dest.received(), l.pos)
	if len(lanes) != 10 {
		t.Fatalf("%d lanes delivered, want 10", len(lanes))
	}
	for p, r := range lanes {
		if r.highest != 99 || r.repeats != 0 {
			t.Fatalf("lane %s: highest position %d, %d repeats; want 99 and none", p, r.highest, r.repeats)
		}
	}
	if code := e.stop(); code != 0 {
		t.Fatalf("mf exited %d after SIGTERM:\n%s", code, e.logs.String())
	}
}

// Kill -9 the engine while messages are sent and delivered, start it again on
// the same SQLite file: every message ACKed AA is delivered at least once,
// each lane in order, and a message is repeated only if it was in flight at
// the kill (at most one per lane).
func TestKillNineLosesNothing(t *testing.T) {
	t.Parallel()
	dest := startReceiver(t, "")
	// The destination answers 50 messages, then holds each connection's
	// next message until after the kill: a backlog and rows in flight are
	// certain at the kill, however fast this machine delivers. (A delay of
	// 2 ms a message once let delivery keep up with a slow sender.)
	slow := make(chan struct{})
	var answered atomic.Int64
	dest.answer = func(received) string {
		if answered.Add(1) > 50 {
			<-slow
		}
		return "AA"
	}
	e := startEngine(t, singleNode(dest.addr(), ""))
	l := newLoad(1000, 10, 4)
	done := make(chan struct{})
	go func() { l.send(t, e.listen); close(done) }()
	// Ingest runs ahead of delivery (the destination holds it): kill once
	// 400 are acked, with sending and delivering both under way.
	waitFor(t, "400 acks and some deliveries before the kill", 60*time.Second, func() bool {
		return l.ackedCount() >= 400 && len(dest.received()) > 0
	})
	e.kill()
	<-done
	acked := l.ackedCount()
	t.Logf("killed with %d messages acked and %d delivered", acked, len(dest.received()))
	if acked == 1000 || len(dest.received()) >= acked {
		t.Fatalf("the kill did not land mid-load: %d acked, %d delivered", acked, len(dest.received()))
	}

	close(slow)
	e.start()
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, "re-pended deliveries") {
			t.Logf("restart: %s", line)
		}
	}
	waitFor(t, "every acked message to be delivered after the restart", 60*time.Second, func() bool { return l.allDelivered(dest) })
	// Let the lanes run dry: anything committed but not acked goes out too.
	waitFor(t, "the lanes to drain", 30*time.Second, func() bool {
		n := len(dest.received())
		time.Sleep(300 * time.Millisecond)
		return len(dest.received()) == n
	})
	lanes := checkLanes(t, dest.received(), l.pos)
	maxAcked := map[string]int{}
	for id := range l.acked {
		var i int
		fmt.Sscanf(id, "M%05d", &i)
		p := patient(i % 10)
		if l.pos[id] > maxAcked[p] {
			maxAcked[p] = l.pos[id]
		}
	}
	for p, r := range lanes {
		if r.repeats > 1 {
			t.Fatalf("lane %s: %d repeats; only the one head in flight at the kill may repeat", p, r.repeats)
		}
		// The message each connection had sent but not yet seen ACKed may
		// have been committed: it may be delivered too, never more.
		if r.highest < maxAcked[p] || r.highest > maxAcked[p]+1 {
			t.Fatalf("lane %s: delivered up to position %d, last acked %d", p, r.highest, maxAcked[p])
		}
	}
	if code := e.stop(); code != 0 {
		t.Fatalf("mf exited %d after SIGTERM", code)
	}
}

// A destination that is down: its lanes dial it again with growing backoff
// (the failed dials use up no attempt) and deliver everything in order once
// the destination is back.
func TestDownDestinationRetriesThenDeliversInOrder(t *testing.T) {
	t.Parallel()
	addr := freePort(t) // nothing listens here yet
	e := startEngine(t, singleNode(addr, ""))
	l := newLoad(20, 2, 2)
	l.send(t, e.listen)
	if len(l.acked) != 20 {
		t.Fatalf("acked %d of 20 while the destination is down", len(l.acked))
	}
	// Wait for four failed dials, with the backoff they chose.
	var delays []float64
	waitFor(t, "four failed dials", 30*time.Second, func() bool {
		delays = dialDelays(e.logs.String())
		return len(delays) >= 4
	})
	for i := 1; i < 3; i++ { // 0.2s·2^n, drawn from its upper half, capped at 1s: 0.1-0.2, 0.2-0.4, 0.4-0.8 grow
		if delays[i] <= delays[i-1] {
			t.Fatalf("backoff does not grow: %v", delays)
		}
	}
	dest := startReceiver(t, addr)
	waitFor(t, "all 20 messages once the destination is back", 30*time.Second, func() bool { return l.allDelivered(dest) })
	for p, r := range checkLanes(t, dest.received(), l.pos) {
		if r.highest != 9 {
			t.Fatalf("lane %s: delivered up to %d, want 9", p, r.highest)
		}
	}
}

// dialDelays returns, in order, the wait before the next dial that each
// failed dial to a destination chose, from mf's JSON log (the sends that
// dialled; those that waited for a dial not yet due dialled nothing).
func dialDelays(logs string) []float64 {
	var out []float64
	for _, line := range strings.Split(logs, "\n") {
		var rec struct {
			Msg     string  `json:"message"`
			Err     string  `json:"error"`
			RetryIn float64 `json:"retry_in"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || !strings.HasPrefix(rec.Msg, "the message was not sent") || !strings.Contains(rec.Err, " failed; next dial in ") {
			continue
		}
		out = append(out, rec.RetryIn)
	}
	return out
}

// With on_exhausted = "dead", a message the destination keeps refusing is set
// aside after max_attempts and the lane moves on to the next.
func TestExhaustedRowIsSetAsideWhenDead(t *testing.T) {
	t.Parallel()
	dest := startReceiver(t, "")
	poison := controlID(4) // patient 0, position 2
	dest.answer = func(r received) string {
		if r.ControlID == poison {
			return "AE"
		}
		return ""
	}
	e := startEngine(t, singleNode(dest.addr(), "max_attempts = 2\non_exhausted = \"dead\""))
	l := newLoad(20, 2, 2)
	l.send(t, e.listen)
	waitFor(t, "every other message to be delivered", 30*time.Second, func() bool {
		return len(dest.received()) == 19
	})
	pos := map[string]int{}
	for id, p := range l.pos {
		if id == poison {
			continue
		}
		if strings.HasPrefix(id, "M") && l.pos[poison] < p && (idNum(id)%2 == idNum(poison)%2) {
			p-- // the lane continues without the dead message
		}
		pos[id] = p
	}
	for p, r := range checkLanes(t, dest.received(), pos) {
		if r.repeats != 0 {
			t.Fatalf("lane %s repeated a message", p)
		}
	}
	if !strings.Contains(e.logs.String(), "set aside as dead") {
		t.Fatalf("no log line says the message was set aside:\n%s", e.logs.String())
	}
}

func idNum(id string) int {
	var i int
	fmt.Sscanf(id, "M%05d", &i)
	return i
}

// The README's quick start, as written: mf run with no config in an empty
// directory, mf send of the example file, messages appear in ./out.
func TestQuickStart(t *testing.T) {
	dir := t.TempDir()
	run := exec.Command(mfBin, "run", "--log-format", "console")
	run.Dir = dir
	logs := &enginetest.LogBuffer{}
	run.Stdout, run.Stderr = logs, logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() { run.Process.Kill() })

	example, err := filepath.Abs("../examples/adt.hl7")
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	waitFor(t, "mf send to succeed against the quick-start engine", 30*time.Second, func() bool {
		out, err = exec.Command(mfBin, "send", "--to", "127.0.0.1:2575", example).CombinedOutput()
		return err == nil
	})
	if !strings.Contains(string(out), "accepted 3, not accepted 0") {
		t.Fatalf("mf send:\n%s", out)
	}
	waitFor(t, "3 files in ./out", 30*time.Second, func() bool {
		entries, _ := os.ReadDir(filepath.Join(dir, "out"))
		return len(entries) == 3
	})
	run.Process.Signal(os.Interrupt)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("mf run ended with %v after SIGINT:\n%s", err, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("mf run did not stop after SIGINT")
	}
}

// Started under nohup, mf run keeps running through a SIGHUP (logging out
// of the session that started it): subscribing to SIGHUP for its clean stop
// undid the ignore nohup had set, and the engine stopped. SIGTERM still
// stops it.
func TestANohupEngineOutlivesASIGHUP(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("nohup"); err != nil {
		t.Fatalf("nohup (coreutils) not found: %v", err)
	}
	dest := startReceiver(t, "")
	e := newEngine(t, singleNode(dest.addr(), ""))
	e.via = []string{"nohup"}
	e.start()
	if err := e.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The signal is handled, or ignored, before anything sent after it: a
	// stop would have refused this message or be logged below.
	if ack, err := enginetest.Dial(t, e.listen).TrySend(adt("AFTER-HUP", "P1")); err != nil || ack.Code != "AA" {
		t.Fatalf("send after SIGHUP: %+v %v", ack, err)
	}
	waitFor(t, "the message delivered", 30*time.Second, func() bool { return len(dest.received()) == 1 })
	if code := e.stopWith(syscall.SIGTERM); code != 0 {
		t.Fatalf("mf exited %d after SIGTERM", code)
	}
	if logs := e.logs.String(); strings.Contains(logs, "hangup") {
		t.Fatalf("mf under nohup took SIGHUP as a stop:\n%s", logs)
	}
}

// SIGTERM while a delivery is in hand: the delivery finishes (the
// destination gets the message and the row is recorded done), the engine
// exits 0, and after a restart the message is not sent again. SIGHUP (the
// terminal mf run was started from closing) stops it the same way: its
// default action killed the process, the delivery in hand cut off.
func TestAStopSignalFinishesTheDeliveryInHand(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			dest := startReceiver(t, "")
			inHand := make(chan struct{}, 1)
			dest.answer = func(r received) string {
				if r.ControlID == "SLOW" {
					inHand <- struct{}{}
					time.Sleep(time.Second) // the destination takes its time to ACK
				}
				return ""
			}
			e := startEngine(t, singleNode(dest.addr(), ""))
			if ack, err := enginetest.Dial(t, e.listen).TrySend(adt("SLOW", "P1")); err != nil || ack.Code != "AA" {
				t.Fatalf("send: %+v %v", ack, err)
			}
			select {
			case <-inHand:
			case <-time.After(30 * time.Second):
				t.Fatal("the delivery never started")
			}
			if code := e.stopWith(sig); code != 0 {
				t.Fatalf("mf exited %d after %v", code, sig)
			}
			if got := dest.received(); len(got) != 1 || got[0].ControlID != "SLOW" {
				t.Fatalf("the destination got %v; want the delivery in hand completed", got)
			}
			e.start()
			if ack, err := enginetest.Dial(t, e.listen).TrySend(adt("NEXT", "P1")); err != nil || ack.Code != "AA" {
				t.Fatalf("send after the restart: %+v %v", ack, err)
			}
			waitFor(t, "the next message", 30*time.Second, func() bool { return len(dest.received()) >= 2 })
			if got := dest.received(); len(got) != 2 || got[1].ControlID != "NEXT" {
				t.Fatalf("after the restart the destination got %v; want SLOW once, then NEXT", got)
			}
		})
	}
}

// Package e2e tests the mf binary from the outside: it builds it once, runs
// it as a separate process with a config of the test's making, feeds it over
// MLLP and watches what reaches real destinations.
package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
)

// mfBin is the binary under test, built once by TestMain.
var mfBin string

func TestMain(m *testing.M) {
	// The engines start with SIGHUP as the system gives it, not as this
	// run got it: a run under nohup (a CI job started so) passed its
	// ignore on, and mf run rightly keeps running through a SIGHUP it was
	// told to ignore, which the tests of a SIGHUP's stop take for a hang.
	// A signal this process handles is reset to its default at exec.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	dir, err := os.MkdirTemp("", "mf-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mfBin = filepath.Join(dir, "mf")
	args := []string{"build", "-o", mfBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building mf:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback address for a process the test starts (see
// reservedAddr).
func freePort(t testing.TB) string {
	t.Helper()
	addr, err := reservedAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// engine is one mf process.
type engine struct {
	t      testing.TB
	dir    string
	config string
	listen string // its MLLP inbound
	api    string // its API's base URL, when the test set one
	cmd    *exec.Cmd
	logs   *enginetest.LogBuffer
	exited chan struct{}
	// via runs mf through a command (nohup), which execs it: the same PID.
	via []string
}

// startEngine writes cfg (a config template: {{listen}} is replaced by a
// free loopback address) into a fresh directory and runs mf there.
func startEngine(t testing.TB, cfg string) *engine {
	t.Helper()
	e := newEngine(t, cfg)
	e.start()
	return e
}

// newEngine prepares an engine without starting it.
func newEngine(t testing.TB, cfg string) *engine {
	t.Helper()
	e := &engine{t: t, dir: t.TempDir(), listen: freePort(t)}
	e.config = filepath.Join(e.dir, "mf.toml")
	cfg = strings.ReplaceAll(cfg, "{{listen}}", e.listen)
	cfg = strings.ReplaceAll(cfg, "{{dir}}", e.dir)
	if err := os.WriteFile(e.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.kill() })
	t.Cleanup(func() { e.logOnFailure() })
	return e
}

// logOnFailure logs, when the test has failed, the engine's last log lines
// above debug level: an engine's log was lost with the test otherwise, and
// a failure that needs the machine to be busy cannot be rerun at will.
func (e *engine) logOnFailure() {
	if !e.t.Failed() || e.logs == nil {
		return
	}
	const keep = 40
	var lines []string
	for _, l := range strings.Split(e.logs.String(), "\n") {
		if l != "" && !strings.Contains(l, `"level":"debug"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) > keep {
		lines = lines[len(lines)-keep:]
	}
	e.t.Logf("the engine on %s, its last %d log lines above debug:\n%s", e.listen, len(lines), strings.Join(lines, "\n"))
}

// start runs the process (again) in the engine's directory and waits until
// its MLLP port accepts connections.
func (e *engine) start() {
	e.t.Helper()
	e.launch()
	waitFor(e.t, "mf to open its MLLP port", 30*time.Second, func() bool {
		e.checkAlive()
		return e.accepts()
	})
}

// launch runs the process (again) and returns at once.
func (e *engine) launch() {
	e.t.Helper()
	e.logs = &enginetest.LogBuffer{}
	args := append(append([]string{}, e.via...), mfBin, "--log-level", "debug", "run", "--config", e.config)
	e.cmd = exec.Command(args[0], args[1:]...)
	e.cmd.Dir = e.dir
	e.cmd.Stdout, e.cmd.Stderr = e.logs, e.logs
	if err := e.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.exited = make(chan struct{})
	go func() { e.cmd.Wait(); close(e.exited) }()
}

// checkAlive fails the test if the process has exited.
func (e *engine) checkAlive() {
	select {
	case <-e.exited:
		e.t.Fatalf("mf exited:\n%s", e.logs.String())
	default:
	}
}

// accepts reports whether the engine's MLLP port accepts a connection now.
func (e *engine) accepts() bool { return e.acceptsWithin(100 * time.Millisecond) }

// acceptsWithin is accepts with a dial timeout of d.
func (e *engine) acceptsWithin(d time.Duration) bool {
	c, err := net.DialTimeout("tcp", e.listen, d)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// signal sends sig to the process.
func (e *engine) signal(sig os.Signal) {
	e.t.Helper()
	if err := e.cmd.Process.Signal(sig); err != nil {
		e.t.Fatalf("signal %v: %v", sig, err)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (e *engine) kill() {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	e.cmd.Process.Kill()
	<-e.exited
}

// stop sends SIGTERM and returns the exit code.
func (e *engine) stop() int {
	e.t.Helper()
	return e.stopWith(syscall.SIGTERM)
}

// stopWith sends sig and returns the exit code (-1: killed by a signal).
func (e *engine) stopWith(sig syscall.Signal) int {
	e.t.Helper()
	e.cmd.Process.Signal(sig)
	select {
	case <-e.exited:
	case <-time.After(60 * time.Second):
		e.t.Fatalf("mf did not exit within 60s of %v:\n%s", sig, e.logs.String())
	}
	return e.cmd.ProcessState.ExitCode()
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	enginetest.WaitFor(t, what, timeout, cond)
}

func adt(id, patient string) []byte { return []byte(enginetest.ADT(id, patient)) }

// receiver is an MLLP destination that records what it gets and answers as
// told: AA normally, or AE/AR for messages the reject function picks.
type receiver struct {
	t        testing.TB
	ln       net.Listener
	mu       sync.Mutex
	got      []received
	answer   func(r received) string // MSA-1 to answer; "" = AA
	closed   chan struct{}
	connsMu  sync.Mutex
	conns    map[net.Conn]bool
	accepted int
}

type received struct {
	ControlID string
	Patient   string
	At        time.Time // when it arrived, to explain a repeat
	// Unanswered: taken and never acknowledged (the chaos sink's stall):
	// the engine must send it again, so it does not count as delivered.
	Unanswered bool
}

func startReceiver(t testing.TB, addr string) *receiver {
	t.Helper()
	return startReceiverAnswering(t, addr, nil)
}

// startReceiverAnswering is startReceiver with answer as its receiver's
// (set before it accepts anything, which reads it).
func startReceiverAnswering(t testing.TB, addr string, answer func(r received) string) *receiver {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, ln: ln, answer: answer, closed: make(chan struct{}), conns: map[net.Conn]bool{}}
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *receiver) addr() string { return r.ln.Addr().String() }

func (r *receiver) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.connsMu.Lock()
		r.conns[c] = true
		r.accepted++
		r.connsMu.Unlock()
		go r.serve(c)
	}
}

func (r *receiver) serve(c net.Conn) {
	defer c.Close()
	fr := hl7.NewFrameReader(bufio.NewReader(c), 1<<20)
	for {
		b, err := fr.ReadFrame()
		if err != nil {
			return
		}
		m, err := hl7.Parse(b)
		if err != nil {
			r.t.Errorf("receiver got an unparsable message: %v", err)
			return
		}
		rec := received{ControlID: m.ControlID(), Patient: m.Get(mustPath("PID-3.1")), At: time.Now()}
		code := ""
		if r.answer != nil {
			code = r.answer(rec)
		}
		if code == "" || code == "AA" {
			r.mu.Lock()
			r.got = append(r.got, rec)
			r.mu.Unlock()
			code = "AA"
		}
		if err := hl7.WriteFrame(c, hl7.Ack(m, hl7.AckCode(code), "")); err != nil {
			return
		}
	}
}

func (r *receiver) close() {
	r.ln.Close()
	r.connsMu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.connsMu.Unlock()
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func mustPath(s string) hl7.Path {
	p, err := hl7.ParsePath(s)
	if err != nil {
		panic(err)
	}
	return p
}

// laneResult is what one lane (one patient) received.
type laneResult struct {
	highest int // highest position delivered
	repeats int // deliveries that repeated the message just before them
}

// checkLanes verifies the FIFO contract on what the destination got: per
// lane, once adjacent repeats are collapsed, the positions delivered are
// exactly 0, 1, 2, ... k — nothing skipped, nothing newer before older. A
// repeat can only be adjacent (the lane's head delivered again after a crash
// or a lost ACK: at least once). pos maps a control id to its position in
// its lane.
func checkLanes(t testing.TB, got []received, pos map[string]int) map[string]*laneResult {
	t.Helper()
	lanes := map[string]*laneResult{}
	last := map[string]string{}
	for _, r := range got {
		if r.ControlID == "PROBE" { // the cluster tests' liveness probes
			continue
		}
		n, ok := pos[r.ControlID]
		if !ok {
			t.Fatalf("the destination received a message that was never sent: %s", r.ControlID)
		}
		l := lanes[r.Patient]
		if l == nil {
			l = &laneResult{highest: -1}
			lanes[r.Patient] = l
		}
		switch {
		case last[r.Patient] == r.ControlID:
			l.repeats++
		case n == l.highest+1:
			l.highest = n
		default:
			t.Fatalf("lane %s: got position %d (%s) after position %d: out of order or skipped", r.Patient, n, r.ControlID, l.highest)
		}
		last[r.Patient] = r.ControlID
	}
	return lanes
}

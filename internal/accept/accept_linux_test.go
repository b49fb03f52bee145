package accept

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// The child process of TestConnectionsBeyondTheDescriptorLimitAreClosed:
// it serves a guarded listener with a descriptor limit of a few more than
// it has open, and answers "ok" on every connection it serves.
func TestMain(m *testing.M) {
	if os.Getenv("MF_ACCEPT_CHILD") == "1" {
		child()
		return
	}
	os.Exit(m.Run())
}

func child() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	var refused atomic.Int64
	g := NewGuard(ln, zerolog.New(os.Stderr), "the test listener", func() { refused.Add(1) })
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		panic(err)
	}
	limit := uint64(len(open) + 4)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr().String())
	var held []net.Conn
	for {
		c, err := g.Accept()
		if err != nil {
			panic(err)
		}
		held = append(held, c) // kept open: the process stays at its limit
		c.Write([]byte("ok\n"))
	}
}

// A process at its descriptor limit served the connections it had, and
// left every further one in the kernel's backlog, connected and never
// answered, until its sender timed out (52 of 100 in a run by hand with
// ulimit -n 64). The guard closes each at once, so that its sender knows,
// counts it, and logs once, not at each accept.
func TestConnectionsBeyondTheDescriptorLimitAreClosed(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "MF_ACCEPT_CHILD=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// stderr is read only once the child has ended: its writes go on
	// until then.
	var stopped bool
	logs := func() string {
		if !stopped {
			cmd.Process.Kill()
			cmd.Wait()
			stopped = true
		}
		return stderr.String()
	}
	defer logs()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the child: %v\n%s", err, logs())
	}
	served, closed := 0, 0
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", strings.TrimSpace(addr))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		switch {
		case err == nil && line == "ok\n":
			served++
		case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
			closed++
		default:
			t.Fatalf("connection %d: %q, %v; want it served (ok) or closed at once, not left waiting\n%s", i+1, line, err, logs())
		}
	}
	if served == 0 || closed == 0 {
		t.Fatalf("%d connections served, %d closed; want the first served and those beyond the limit closed\n%s", served, closed, logs())
	}
	if got := logs(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "LimitNOFILE") {
		t.Fatalf("%d connections closed at the limit logged in %d lines, want one saying which limit to raise:\n%s", closed, strings.Count(got, "\n"), got)
	}
}

// Where the spare cannot be had for another reason than the limit (no
// /dev/null in a bare container), connections are served, not taken for
// ones beyond the limit and closed.
func TestConnectionsAreServedWithoutASpare(t *testing.T) {
	old := openSpare
	openSpare = func() (*os.File, error) { return nil, &os.PathError{Op: "open", Path: os.DevNull, Err: syscall.ENOENT} }
	defer func() { openSpare = old }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := NewGuard(ln, zerolog.Nop(), "the test listener", nil)
	defer g.Close()
	go func() {
		for {
			c, err := g.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("ok\n"))
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ok\n" {
		t.Fatalf("a connection with no spare descriptor to be had (no %s): %q, %v; want it served", os.DevNull, line, err)
	}
}

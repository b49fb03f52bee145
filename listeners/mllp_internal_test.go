package listeners

import (
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
)

// outOfFilesListener is a listener whose Accept fails as it does when the process
// has no file descriptor left, while failing is set.
type outOfFilesListener struct {
	net.Listener
	failing  atomic.Bool
	failures atomic.Int64
}

func (l *outOfFilesListener) Accept() (net.Conn, error) {
	if l.failing.Load() {
		l.failures.Add(1)
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// An accept that keeps failing (the process out of file descriptors) is
// tried again every 50 ms; each failure was a WARN line, "accept failed;
// retrying", twenty a second (72,000 an hour), none saying what to do. It is
// logged when it starts, once a minute while it lasts, with how many
// failures, and when accepting works again; out of descriptors, the line
// says which limit to raise.
func TestAnAcceptThatKeepsFailingIsLoggedWhenItStartsAndEnds(t *testing.T) {
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &outOfFilesListener{Listener: real}
	ln.failing.Store(true)
	var logs logbuf.Buffer
	l := &MLLP{cfg: config.Inbound{Name: "adt_in", MaxConnections: 10}, log: zerolog.New(&logs), ln: ln,
		closing: make(chan struct{}), killed: make(chan struct{}), conns: &connSet{m: map[net.Conn]struct{}{}}}
	l.accepted.Add(1)
	go l.acceptLoop()
	defer func() {
		close(l.closing)
		real.Close()
		l.accepted.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for ln.failures.Load() < 10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ln.failing.Store(false)
	c, err := net.Dial("tcp", real.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for !strings.Contains(logs.String(), "accepting connections again") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := logs.String()
	if n := strings.Count(got, "\n"); n != 2 || !strings.Contains(got, "accepting connections again") {
		t.Fatalf("%d failed accepts logged in %d lines, want one when they start and one when they end:\n%s", ln.failures.Load(), n, got)
	}
	if !strings.Contains(got, "LimitNOFILE") {
		t.Fatalf("the line does not say which limit to raise:\n%s", got)
	}
}

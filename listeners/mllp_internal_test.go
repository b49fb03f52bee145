package listeners

import (
	"errors"
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

// togglingListener fails its accepts as out of descriptors while failing is
// set, whether a connection waits or not (as the kernel does: it takes the
// descriptor first), and counts the connections it hands out.
type togglingListener struct {
	*net.TCPListener
	failing            atomic.Bool
	failures, accepted atomic.Int64
}

func (l *togglingListener) Accept() (net.Conn, error) {
	for {
		if l.failing.Load() {
			l.failures.Add(1)
			return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
		}
		// A short wait, to see failing set meanwhile.
		l.SetDeadline(time.Now().Add(5 * time.Millisecond))
		c, err := l.TCPListener.Accept()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err == nil {
			l.accepted.Add(1)
		}
		return c, err
	}
}

// At the descriptor limit accepts alternate between failing and working as
// descriptors come and go (a sender gives up, another connects): each turn
// was two lines, "accepting MLLP connections fails" and "accepting
// connections again", since a success started the count anew. They are
// logged once a minute however often they alternate.
func TestAcceptsAlternatingAtTheDescriptorLimitAreLoggedOnce(t *testing.T) {
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &togglingListener{TCPListener: real.(*net.TCPListener)}
	var logs logbuf.Buffer
	l := &MLLP{cfg: config.Inbound{Name: "adt_in", MaxConnections: 100}, log: zerolog.New(&logs), ln: ln,
		closing: make(chan struct{}), killed: make(chan struct{}), conns: &connSet{m: map[net.Conn]struct{}{}}}
	l.accepted.Add(1)
	go l.acceptLoop()
	var conns []net.Conn
	defer func() {
		close(l.closing)
		real.Close()
		for _, c := range conns {
			c.Close()
		}
		l.accepted.Wait()
	}()
	served := func() int { return int(ln.accepted.Load()) }
	deadline := time.Now().Add(20 * time.Second)
	for turn := 1; turn <= 10; turn++ {
		ln.failing.Store(true)
		for seen := ln.failures.Load(); ln.failures.Load() < seen+2 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		ln.failing.Store(false)
		c, err := net.Dial("tcp", real.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		for served() < turn && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if served() < turn {
			t.Fatalf("turn %d: %d connections served, want %d\n%s", turn, served(), turn, logs.String())
		}
	}
	got := logs.String()
	if n := strings.Count(got, "\n"); n > 2 {
		t.Fatalf("10 turns of failing and working accepts logged in %d lines, want at most 2 (one when they start, one when they end):\n%s", n, got)
	}
}

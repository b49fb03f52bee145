package listeners

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
)

// interruptingListener hands out connections that say when a read
// deadline that has passed is set on them: a stop's interruption
// (connSet.stop).
type interruptingListener struct {
	net.Listener
	conns chan *interruptedConn
}

func (l *interruptingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ic := &interruptedConn{Conn: c, interrupted: make(chan struct{})}
	l.conns <- ic
	return ic, nil
}

type interruptedConn struct {
	net.Conn
	interrupted chan struct{} // closed at the first read deadline set that has passed
	once        sync.Once
}

func (c *interruptedConn) SetReadDeadline(t time.Time) error {
	err := c.Conn.SetReadDeadline(t)
	if !t.IsZero() && !t.After(time.Now()) {
		c.once.Do(func() { close(c.interrupted) })
	}
	return err
}

// A stop whose interruption of the reads (connSet.stop: the read deadline
// set to now) comes after a frame's start block is read and before the
// frame's read deadline is set ends the connection at once. The frame's
// deadline, read_timeout from then, undid the interruption: the connection
// read on, the stop waited its whole grace (5 s) and closed it as one
// with a message in hand.
func TestAStopBetweenAFramesStartAndItsDeadlineEndsTheConnection(t *testing.T) {
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &interruptingListener{Listener: real, conns: make(chan *interruptedConn, 1)}
	started, proceed := make(chan struct{}), make(chan struct{})
	var logs logbuf.Buffer
	l := &MLLP{env: &Env{Ctx: context.Background()}, log: zerolog.New(&logs), ln: ln,
		cfg:     config.Inbound{Name: "stop_in", MaxConnections: 10, MaxMessageBytes: 1024, IdleTimeoutSeconds: 60, ReadTimeoutSeconds: 30},
		closing: make(chan struct{}), killed: make(chan struct{}), conns: &connSet{m: map[net.Conn]struct{}{}},
		frameStarted: func() { close(started); <-proceed }}
	l.accepted.Add(1)
	go l.acceptLoop()

	c, err := net.DialTimeout("tcp", real.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	served := <-ln.conns
	// A frame begins, and the rest of it is slow to come.
	if _, err := c.Write([]byte{hl7.StartBlock}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not read the frame's start block within 10 s")
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		l.stop()
	}()
	select {
	case <-served.interrupted:
	case <-time.After(10 * time.Second):
		close(proceed)
		t.Fatal("the stop did not interrupt the connection's reads within 10 s")
	}
	close(proceed) // now the connection sets the frame's deadline
	begun := time.Now()
	select {
	case <-stopped:
	case <-time.After(Grace + 10*time.Second):
		t.Fatal("the stop did not end")
	}
	if took := time.Since(begun); took > Grace/2 || strings.Contains(logs.String(), "grace ran out") {
		t.Fatalf("the stop took %s after its interruption, its grace being %s; want the connection ended at once:\n%s", took.Round(time.Millisecond), Grace, logs.String())
	}
}

package api

import (
	"crypto/tls"
	"net"
	"net/http"
	"testing"

	"github.com/rs/zerolog"
)

// The API takes at most half the process's descriptors, and never more
// than maxAPIConns.
func TestAPIConnsFor(t *testing.T) {
	for _, c := range []struct {
		fds  uint64
		want int
	}{{0, maxAPIConns}, {1 << 20, maxAPIConns}, {2 * maxAPIConns, maxAPIConns}, {20000, maxAPIConns}, {1024, 512}, {10, 16}} {
		if got := apiConnsFor(c.fds); got != c.want {
			t.Errorf("apiConnsFor(%d) = %d, want %d", c.fds, got, c.want)
		}
	}
}

// pipeListener accepts the connections sent on it.
type pipeListener struct {
	net.Listener
	conns chan net.Conn
}

func (l pipeListener) Accept() (net.Conn, error) { return <-l.conns, nil }

// A connection that began a request no longer waits for its first one,
// over TLS too, where net/http names it by its *tls.Conn: otherwise a
// request in progress over TLS (a large message read) could be cut to make
// way at the bound once a second had passed.
func TestAConnectionThatBeganARequestIsNoLongerWaiting(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		a, b := net.Pipe()
		defer b.Close()
		l := newConnCap(pipeListener{conns: make(chan net.Conn, 1)}, 4, zerolog.Nop())
		l.Listener.(pipeListener).conns <- a
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if overTLS {
			c = tls.Server(c, &tls.Config{})
		}
		l.state(c, http.StateNew)
		if n := l.waiting.Len(); n != 1 {
			t.Fatalf("TLS %v: %d connections waiting for their first request after an accept, want 1", overTLS, n)
		}
		l.state(c, http.StateActive)
		if n := l.waiting.Len(); n != 0 {
			t.Fatalf("TLS %v: %d connections waiting for their first request after one began, want 0", overTLS, n)
		}
		c.Close()
		if l.open != 0 {
			t.Fatalf("TLS %v: %d connections open after the close, want 0", overTLS, l.open)
		}
	}
}

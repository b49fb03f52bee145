package api

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// maxAPIConns is the most connections the API holds open at once: far
// above what its clients need (load balancer checks, scrapes, dashboards,
// an operator's mf status), and few enough goroutines and buffers to cost
// a few tens of MB. apiConnsFor lowers it to half the process's file
// descriptors where those are fewer.
const maxAPIConns = 4096

// apiConnsFor is the bound on the API's connections under a limit of fds
// file descriptors (0: none known): at most half of them, so that clients
// of the API, with or without a token, can never take the descriptors the
// MLLP listeners, the store and the destinations need.
func apiConnsFor(fds uint64) int {
	if fds == 0 || fds/2 >= maxAPIConns {
		return maxAPIConns
	}
	return max(int(fds/2), 16)
}

// firstRequestGrace is how long a connection may stay silent (no byte
// sent) before it can be closed to make way at the bound. A client sends its
// request within milliseconds of connecting (a TLS handshake included);
// one that sends nothing for a second is a stalled or hostile client, and
// letting it keep its place for the header timeout (10 s) let about 410
// such connections a second lock out every client, /health and /ready
// too. Short enough that the place comes back well within a load
// balancer's check timeout, long enough that a slow but real client is
// not cut before its request.
const firstRequestGrace = time.Second

// connCap is the API's listener, holding at most max connections open at
// once. At the bound it closes a kept-alive connection that is idle
// between requests to make way for the new one (a client that asked once
// and kept its connection must not lock out the next, such as a load
// balancer's check); with none idle, the oldest connection still waiting
// for its first request, once it has waited firstRequestGrace; with
// neither, it closes the new connection at once. Every connection is
// counted from its accept to its close, whoever closes it.
type connCap struct {
	net.Listener
	max int
	log zerolog.Logger

	mu   sync.Mutex
	open int
	// idle holds the connections net/http reports idle (http.StateIdle),
	// as it names them: the counted connection, or the TLS connection
	// over it.
	idle map[net.Conn]struct{}
	// waiting holds the connections that have sent nothing yet,
	// *countedConn, oldest first.
	waiting *list.List
	// since the last line: connections closed to make way (idle, or
	// waiting for their first request), and refused
	evicted, evictedWaiting, refused int
	logged                           time.Time
}

func newConnCap(ln net.Listener, max int, log zerolog.Logger) *connCap {
	return &connCap{Listener: ln, max: max, log: log, idle: map[net.Conn]struct{}{}, waiting: list.New()}
}

// Accept returns the next connection there is room for.
func (l *connCap) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		var victim net.Conn
		if l.open >= l.max {
			for v := range l.idle {
				victim = v
				break
			}
			if victim != nil {
				// A request that starts on it just now is cut, as at
				// the idle timeout: HTTP clients send such a request
				// again.
				delete(l.idle, victim)
				l.evicted++
			} else if oldest := l.waiting.Front(); oldest != nil && time.Since(oldest.Value.(*countedConn).accepted) > firstRequestGrace {
				w := oldest.Value.(*countedConn)
				l.waiting.Remove(oldest)
				w.waiting = nil
				victim = w
				l.evictedWaiting++
			} else {
				l.refused++
				l.report()
				l.mu.Unlock()
				c.Close()
				continue
			}
			l.report()
		}
		l.open++
		cc := &countedConn{Conn: c, l: l, accepted: time.Now()}
		cc.waiting = l.waiting.PushBack(cc)
		l.mu.Unlock()
		if victim != nil {
			// Not here: a TLS connection's close writes an alert, which
			// a client that reads nothing could hold up for seconds.
			go victim.Close()
		}
		return cc, nil
	}
}

// report logs, at most once a minute, that the bound was reached. Called
// with mu held.
func (l *connCap) report() {
	now := time.Now()
	if now.Sub(l.logged) < time.Minute {
		return
	}
	l.log.Warn().Int("max_connections", l.max).Int("idle_closed", l.evicted).Int("silent_closed", l.evictedWaiting).Int("refused", l.refused).
		Msg("the API is at its bound of open connections: idle kept-alive connections, then connections that sent no request within " + firstRequestGrace.String() + ", are closed to make way for new ones, and new ones closed at once when there is neither; logged once a minute while it lasts (is a client opening connections without end? a firewall's or load balancer's log names it)")
	l.logged = now
	l.evicted, l.evictedWaiting, l.refused = 0, 0, 0
}

// state follows net/http's view of each connection (http.Server.ConnState).
func (l *connCap) state(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == http.StateIdle {
		l.idle[c] = struct{}{}
	} else {
		delete(l.idle, c)
	}
	if s != http.StateNew {
		if cc := counted(c); cc != nil {
			l.answered(cc)
		}
	}
}

// answered takes c off the connections waiting for their first request.
// Called with mu held.
func (l *connCap) answered(c *countedConn) {
	if c.waiting != nil {
		l.waiting.Remove(c.waiting)
		c.waiting = nil
	}
}

// counted returns the countedConn under c: net/http names a TLS
// connection by its *tls.Conn, over the one Accept returned.
func counted(c net.Conn) *countedConn {
	for {
		switch v := c.(type) {
		case *countedConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}

// countedConn gives its place back when first closed.
type countedConn struct {
	net.Conn
	l    *connCap
	once sync.Once
	// accepted is when Accept returned it; waiting its element of
	// l.waiting until it sends its first bytes or begins a request (nil
	// after), under l.mu.
	accepted time.Time
	waiting  *list.Element
	// sent is set at its first bytes read: net/http says a request began
	// only once its headers are whole, and a client still sending them (or
	// its TLS handshake) a second after it connected was cut.
	sent atomic.Bool
}

// Read takes the connection off those waiting at its first bytes.
func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.sent.Load() {
		c.sent.Store(true)
		c.l.mu.Lock()
		c.l.answered(c)
		c.l.mu.Unlock()
	}
	return n, err
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.answered(c)
		c.l.mu.Unlock()
	})
	return err
}

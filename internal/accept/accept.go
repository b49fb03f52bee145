// Package accept keeps a server's accept loop sane when the process runs
// out of file descriptors (ulimit -n, systemd LimitNOFILE): the listeners'
// MLLP ports and the HTTP API use it.
//
// At the limit every accept fails at once, whether a connection waits or
// not (the kernel takes the descriptor first), so a loop that retries
// would fail forever, and the connections waiting in the kernel's backlog
// hang until their senders time out. Guard keeps one spare descriptor: at
// the limit it lets it go, takes the waiting connection with it and closes
// that connection at once (the sender sees it closed, not a silence), and
// takes the spare back; the connections already open are served as
// before. Its log lines are counted over a minute, not per accept:
// accepts alternate between failing and working as descriptors come and
// go, and each alternation was two lines.
package accept

import (
	"net"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Repeat is how often an accept failure that lasts is logged again.
const Repeat = time.Minute

// retryEvery is how long Accept waits before trying again after a failure
// that the spare descriptor could not relieve.
const retryEvery = 50 * time.Millisecond

// Guard wraps a net.Listener: its Accept never returns an
// out-of-descriptors error (see the package doc).
type Guard struct {
	net.Listener
	log  zerolog.Logger
	what string
	// refused, if not nil, counts each connection closed at the limit.
	refused func()

	mu      sync.Mutex // Accept's state: one caller at a time
	spare   *os.File
	failing bool
	// since the last line: the failed accepts and the connections closed
	failures, closed   int
	lastFail, lastBack time.Time
}

// NewGuard wraps ln. what names the listener in its log lines ("the MLLP
// listener", "the API"); refused, if not nil, is called for each
// connection closed at the limit.
func NewGuard(ln net.Listener, log zerolog.Logger, what string, refused func()) *Guard {
	g := &Guard{Listener: ln, log: log, what: what, refused: refused}
	g.spare, _ = openSpare() // none: the first failure finds out
	return g
}

// openSpare opens the spare descriptor (a variable: a test stands in for
// a system without /dev/null).
var openSpare = func() (*os.File, error) { return os.Open(os.DevNull) }

// Accept returns the next connection that this process has a descriptor
// for. Out of descriptors, it closes waiting connections (see the package
// doc) until one can be served, logging at most once a Repeat.
func (g *Guard) Accept() (net.Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		c, err := g.Listener.Accept()
		if err == nil {
			if g.spare == nil {
				// Taken with the spare's descriptor: serve it only if the
				// spare can be had again, else the process is at its limit.
				// A spare missing for another reason (no /dev/null) says
				// nothing of the limit: the connection is served.
				if g.spare, err = openSpare(); err != nil && OutOfFiles(err) {
					c.Close()
					g.spare, _ = openSpare()
					g.closed++
					if g.refused != nil {
						g.refused()
					}
					g.failed(err)
					continue
				}
			}
			g.back()
			return c, nil
		}
		if !OutOfFiles(err) {
			return nil, err
		}
		g.failed(err)
		if g.spare != nil {
			// Frees a descriptor for the connection waiting (or the next
			// one): taken above, and closed if the spare cannot be had back.
			g.spare.Close()
			g.spare = nil
			continue
		}
		time.Sleep(retryEvery)
		g.spare, _ = openSpare()
	}
}

// Close closes the listener and lets the spare descriptor go.
func (g *Guard) Close() error {
	err := g.Listener.Close()
	g.Release()
	return err
}

// Release lets the spare descriptor go, and leaves the listener open: for
// an accept loop that ends while its listener is closed by another owner.
func (g *Guard) Release() {
	// Accept holds mu while it waits; the listener closed, it returns.
	g.mu.Lock()
	if g.spare != nil {
		g.spare.Close()
		g.spare = nil
	}
	g.mu.Unlock()
}

// failed logs an accept failure out of descriptors when none was logged
// for a Repeat.
func (g *Guard) failed(err error) {
	g.failing = true
	g.failures++
	now := time.Now()
	if now.Sub(g.lastFail) < Repeat {
		return
	}
	g.lastFail = now
	g.log.Error().Err(err).Int("failures", g.failures).Int("connections_closed", g.closed).
		Msg(g.what + " is out of file descriptors: connections waiting are closed at once, those open are served; logged once a minute while it lasts " +
			"(raise the process's limit, systemd LimitNOFILE or ulimit -n, above the inbounds' max_connections, [store] pool_size and the destinations' connections together)")
	g.failures, g.closed = 0, 0
}

// back logs that accepting works again, after a failure, at most once a
// Repeat.
func (g *Guard) back() {
	if !g.failing {
		return
	}
	g.failing = false
	now := time.Now()
	if now.Sub(g.lastBack) < Repeat {
		return
	}
	g.lastBack = now
	g.log.Info().Int("failures", g.failures).Int("connections_closed", g.closed).Msg(g.what + ": accepting connections again")
}

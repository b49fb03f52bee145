package listeners

import (
	"net"
	"sync"
	"time"
)

// faultRepeat is how often a connection fault that recurs, the same fault
// from the same host, is logged again.
const faultRepeat = time.Minute

// maxFaultKeys bounds the faults remembered; past it the oldest are
// forgotten, which costs only a line logged again.
const maxFaultKeys = 1024

// faults decides which connection faults of a listener are logged: the
// first of a kind from a host, then one a faultRepeat while it recurs, with
// how many went unlogged in between. A partner engine that is set up wrong
// (no MLLP framing, a certificate this node refuses) reconnects every few
// seconds and fails the same way each time; each connection used to be a
// WARN line of its own, and the other lines of the log drowned in them.
// The zero value is ready; it is safe for concurrent use (every connection
// of the listener shares one).
type faults struct {
	mu   sync.Mutex
	seen map[faultKey]*faultSeen
}

type faultKey struct{ kind, host string }

type faultSeen struct {
	logged   time.Time
	unlogged int
}

// note records a fault of kind from remote at now. It reports whether to
// log it, and how many faults of that kind from that host went unlogged
// since the last line.
func (f *faults) note(kind string, remote net.Addr, now time.Time) (log bool, unlogged int) {
	host := remote.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h // each reconnection comes from a new port
	}
	k := faultKey{kind, host}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[faultKey]*faultSeen{}
	}
	s := f.seen[k]
	if s != nil && now.Sub(s.logged) < faultRepeat {
		s.unlogged++
		return false, s.unlogged
	}
	if s == nil {
		if len(f.seen) >= maxFaultKeys {
			f.forget(now)
		}
		s = &faultSeen{}
		f.seen[k] = s
	}
	unlogged, s.logged, s.unlogged = s.unlogged, now, 0
	return true, unlogged
}

// forget drops the faults not logged within faultRepeat (their next one
// is logged anyway), or all of them if every one is recent: a scan from
// many hosts at once.
func (f *faults) forget(now time.Time) {
	for k, s := range f.seen {
		if now.Sub(s.logged) >= faultRepeat {
			delete(f.seen, k)
		}
	}
	if len(f.seen) >= maxFaultKeys {
		clear(f.seen)
	}
}

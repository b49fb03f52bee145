package storage

import (
	"sync"
	"sync/atomic"
	"time"
)

// OutageRepeat is how often a failure that lasts is logged again.
const OutageRepeat = time.Minute

// Outage counts the failures of store calls that are retried until they
// work, so that a database away is logged when the failures start, once an
// OutageRepeat while they last and when they end, not at every attempt:
// every lane retries each second, and each line used to be its own. The
// zero value is ready; it is safe for concurrent use (one Outage serves all
// the lanes of a graph).
type Outage struct {
	failing atomic.Bool // read on every success, which must stay cheap
	mu      sync.Mutex
	n       int       // failures since the last line that counted them
	logged  time.Time // when a failure was last logged
	last    time.Time // when the last failure was
	// reported is set when a failure of the outage in hand was logged:
	// only then is its end.
	reported bool
}

// outageQuiet is how long calls must have worked for a failure to start an
// outage of its own, logged at once: failures closer together than that,
// with successes between, are calls that fail and work in turn.
const outageQuiet = 10 * time.Second

// Failed records a failure at now. It reports whether to log it, and the
// failures counted so far. A failure is logged unless one was less than
// OutageRepeat ago, including one of an outage that has since ended: a
// call that fails and works in turn (a pool whose new sessions the
// database refuses while its open ones work) logs once a minute, not at
// every turn. A failure after calls worked for outageQuiet starts an
// outage of its own and is logged all the same: counted only, a database
// away for less than OutageRepeat soon after the last line left no line
// at all. Failures not logged are counted in the next line.
func (o *Outage) Failed(now time.Time) (log bool, failures int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	quiet := !o.failing.Load() && now.Sub(o.last) >= outageQuiet
	if !o.failing.Load() && now.Sub(o.last) >= OutageRepeat {
		o.n = 0 // a new outage, long after the last failure
	}
	o.failing.Store(true)
	o.n++
	o.last = now
	if now.Sub(o.logged) < OutageRepeat && !quiet {
		return false, o.n
	}
	o.logged, o.reported = now, true
	return true, o.n
}

// Over records a success and returns how many failures it ends: 0 when
// none was counted (the usual case, which takes no lock), and 0 for an
// outage none of whose failures was logged, whose count goes on into the
// next line.
func (o *Outage) Over() int {
	if !o.failing.Load() {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failing.Store(false)
	if !o.reported {
		return 0
	}
	n := o.n
	o.n, o.reported = 0, false
	return n
}

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
	n       int       // failures since the last success
	logged  time.Time // when the failure was last logged
}

// Failed records a failure at now. It reports whether to log it, and the
// failures counted so far.
func (o *Outage) Failed(now time.Time) (log bool, failures int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failing.Store(true)
	o.n++
	if o.n > 1 && now.Sub(o.logged) < OutageRepeat {
		return false, o.n
	}
	o.logged = now
	return true, o.n
}

// Over records a success and returns how many failures it ends (0 when
// none was counted: the usual case, which takes no lock).
func (o *Outage) Over() int {
	if !o.failing.Load() {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.n
	o.n, o.logged = 0, time.Time{}
	o.failing.Store(false)
	return n
}

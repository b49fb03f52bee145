package lanes

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// outage follows the failed sends of one destination, shared by its lanes,
// so that a destination down is logged when its failures start, once a
// minute (storage.OutageRepeat) while they last and when a delivery works
// again, not at each retry of each lane: with a lane per patient, that was
// thousands of lines an hour.
//
// Unlike storage.Outage, a success does not make the next failure a line
// of its own: failures are logged at most once a minute, whatever came
// between them, and a delivery ends them with a line only if they were
// logged. A destination that takes some messages and fails others (an AE
// for every other lane) is one line a minute too, not two at every turn.
// The zero value is ready; it is safe for concurrent use.
type outage struct {
	failing atomic.Bool // read on every delivery, which must stay cheap
	mu      sync.Mutex
	n       int       // failures since the last delivery
	logged  time.Time // when failures were last logged
	told    bool      // the failures counted in n have been logged
}

// failed records a failed send at now. It reports whether to log it, and
// the failures since the last delivery.
func (o *outage) failed(now time.Time) (log bool, failures int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failing.Store(true)
	o.n++
	if !o.logged.IsZero() && now.Sub(o.logged) < storage.OutageRepeat {
		return false, o.n
	}
	o.logged, o.told = now, true
	return true, o.n
}

// over records a delivery and returns how many failures it ends if they
// were logged, else 0 (the usual case takes no lock).
func (o *outage) over() int {
	if !o.failing.Load() {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	n, told := o.n, o.told
	o.n, o.told = 0, false
	o.failing.Store(false)
	if !told {
		return 0
	}
	return n
}

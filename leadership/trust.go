package leadership

import (
	"sync"
	"sync/atomic"
	"time"
)

// Trust is the leader's trust window, shared read-only with the graph: the
// instant (on this process's monotonic clock) until which this node may act
// as leader without a newer renewal. The elector moves it; lanes read it
// before each send, and their senders again right before the write
// (lanes.Outgoing.MayWrite), so that a process resumed after a pause longer
// than the window (SIGSTOP, a long GC or VM stall) sends nothing to a
// destination before the elector has fenced it; a pause the monotonic
// clock did not count (a suspend) is not seen (doc.go, Clocks). Database writes are fenced
// in the store anyway; the trust check covers the side effects the store
// cannot see.
//
// It also ends the term (closes its Changed.Ended) the moment the window
// lapses, on a timer of its own: a send already being written when the
// window closes is cut off then (root cancels the term's graph on Ended),
// even while the elector is held up in a call that ignores its deadline,
// instead of running on to the destination's timeout while the next leader
// may be sending the same lane. A window that has lapsed stays closed for
// the rest of its term: a renewal answered after it cannot reopen it.
type Trust struct {
	until atomic.Pointer[time.Time]
	// always is set for a single node: nobody else can ever lead.
	always bool

	mu    sync.Mutex
	term  chan struct{} // the held term's Ended; nil when no term is held
	timer *time.Timer   // fires at until, to end the term if it has not moved
}

// NewTrust returns a trust window that starts closed.
func NewTrust() *Trust { return &Trust{} }

// AlwaysTrusted is the single-node trust: always open.
func AlwaysTrusted() *Trust { return &Trust{always: true} }

// Trusted reports whether the window is open now.
func (t *Trust) Trusted() bool {
	if t == nil || t.always {
		return true
	}
	u := t.until.Load()
	return u != nil && time.Now().Before(*u)
}

// begin starts a term with its window open until until, and returns the
// term's Ended: closed when the window lapses, or by close. One step, so
// that the timer of a term ended before cannot end this one.
func (t *Trust) begin(until time.Time) chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.endLocked()
	t.term = make(chan struct{})
	t.openLocked(until)
	return t.term
}

// set moves the window of the term held to until, and reports whether it
// could: not once that term has ended, by a lapse or close, nor once its
// window has passed while the lapse's timer has yet to run (a renewal
// answered just after the window closed reopened it then).
func (t *Trust) set(until time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.term == nil {
		return false
	}
	if u := t.until.Load(); u == nil || !time.Now().Before(*u) {
		t.endLocked()
		return false
	}
	t.openLocked(until)
	return true
}

func (t *Trust) openLocked(until time.Time) {
	t.until.Store(&until)
	if t.timer == nil {
		t.timer = time.AfterFunc(time.Until(until), t.lapse)
	} else {
		t.timer.Reset(time.Until(until))
	}
}

// lapse ends the term unless a renewal has moved the window since the
// timer was set.
func (t *Trust) lapse() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.term == nil {
		return
	}
	if u := t.until.Load(); u != nil && time.Now().Before(*u) {
		t.timer.Reset(time.Until(*u))
		return
	}
	t.endLocked()
}

// close closes the window and ends the term held, if any.
func (t *Trust) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.endLocked()
}

func (t *Trust) endLocked() {
	t.until.Store(nil)
	if t.timer != nil {
		t.timer.Stop()
	}
	if t.term != nil {
		close(t.term)
		t.term = nil
	}
}

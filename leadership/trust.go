package leadership

import (
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
type Trust struct {
	until atomic.Pointer[time.Time]
	// always is set for a single node: nobody else can ever lead.
	always bool
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

func (t *Trust) set(until time.Time) { t.until.Store(&until) }

func (t *Trust) close() { t.until.Store(nil) }

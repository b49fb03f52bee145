package leadership

import "github.com/messagefoundry/mf/storage"

// Changed reports a change of this node's leadership to the leadership
// actor's parent (root). Changes are sent in the order they happen, none
// dropped, so root always acts on the latest.
type Changed struct {
	// Leader is true from the moment the node holds the lease (Fence says
	// under which term) until it loses or gives it up.
	Leader bool
	Fence  storage.Fence
	// Ended, on a gain, is closed the moment that term's leadership ends
	// (lost, fenced, resigned), before root reads the Changed that reports
	// it: root may be busy then (a drain lasts up to the drain timeout), and
	// the graph must stop acting at once, not after it. Nil: never closed.
	Ended <-chan struct{}
	// Reason says why, for logs and the mf_leadership_changes_total metric:
	// "single-node", "elected", "renew-lost", "fenced", "lock-lost" (another
	// process took a single node's lock: storage.SingleNode.Hold); a clean
	// stop resigns without a Changed: the node is stopping.
	Reason string
	// Err, on a loss that ends a single node for good ("lock-lost"), says
	// why: the engine fails with it.
	Err error
}

// Fenced tells the leadership actor that a write of the term Fence was
// refused by the fence (storage.ErrFenced), or that its promotion recovery
// was: the lease has moved past that term. Root may tell it late (it works
// through its messages in turn, and a recovery or a drain takes seconds),
// after the leadership actor lost that term and won a newer one itself:
// a Fenced for a term other than the one held says nothing of the one
// held, and is ignored.
type Fenced struct {
	Fence storage.Fence
}

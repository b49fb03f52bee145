package leadership

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/messagefoundry/mf/storage"
)

// SingleNode is the leadership actor of a node that is not clustered: it is
// the leader of term 0 from the start, with the zero fence (which matches
// only a lease row no cluster node was ever elected into).
type SingleNode struct {
	// lockLost says that another process took this node's single-node
	// lock (storage.SingleNode.Hold); nil on a store that has none.
	lockLost <-chan error
	lost     bool
	ended    chan struct{}
	// quit ends the wait on lockLost when the actor stops.
	quit chan struct{}
}

// lockTaken is lockLost's error, in the actor's mailbox.
type lockTaken struct{ err error }

// NewSingleNode returns the props of the single-node leadership actor.
// lockLost, if not nil, is the channel on which the store's single-node
// lock says that another process took it (HoldSingleNode): the node's
// leadership then ends for good, at once, as a fenced one does.
func NewSingleNode(lockLost <-chan error) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &SingleNode{lockLost: lockLost} })
}

// Receive implements actor.Actor. A fenced write (a cluster has been
// elected into this database since) or the single-node lock taken by
// another process ends its leadership for good: it closes the term's
// Ended, which abandons the deliveries in hand at once, reports the loss,
// and never leads again.
func (n *SingleNode) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		n.ended = make(chan struct{})
		ctx.Send(ctx.Parent(), Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node", Ended: n.ended})
		if n.lockLost != nil {
			n.quit = make(chan struct{})
			system, self, lockLost, quit := ctx.ActorSystem(), ctx.Self(), n.lockLost, n.quit
			go func() {
				select {
				case err := <-lockLost:
					system.Root.Send(self, lockTaken{err: err})
				case <-quit:
				}
			}()
		}
	case Fenced:
		n.lose(ctx, "fenced", nil)
	case lockTaken:
		n.lose(ctx, "lock-lost", msg.err)
	case *actor.Stopping, *actor.Restarting:
		if n.quit != nil {
			close(n.quit)
			n.quit = nil
		}
	}
}

func (n *SingleNode) lose(ctx actor.Context, reason string, err error) {
	if n.lost {
		return
	}
	n.lost = true
	close(n.ended)
	ctx.Send(ctx.Parent(), Changed{Leader: false, Fence: storage.Fence{}, Reason: reason, Err: err})
}

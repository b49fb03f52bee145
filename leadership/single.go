package leadership

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/messagefoundry/mf/storage"
)

// SingleNode is the leadership actor of a node that is not clustered: it is
// the leader of term 0 from the start, with the zero fence (which matches
// only a lease row no cluster node was ever elected into).
type SingleNode struct {
	lost  bool
	ended chan struct{}
}

// NewSingleNode returns the props of the single-node leadership actor.
func NewSingleNode() *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &SingleNode{} })
}

// Receive implements actor.Actor. A fenced write (a cluster has been
// elected into this database since) ends its leadership for good: it
// reports the loss, and never leads again.
func (n *SingleNode) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		n.ended = make(chan struct{})
		ctx.Send(ctx.Parent(), Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node", Ended: n.ended})
	case Fenced:
		if !n.lost {
			n.lost = true
			close(n.ended)
			ctx.Send(ctx.Parent(), Changed{Leader: false, Fence: storage.Fence{}, Reason: "fenced"})
		}
	}
}

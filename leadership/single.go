package leadership

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/messagefoundry/mf/storage"
)

// SingleNode is the leadership actor of a node that is not clustered: it is
// the leader of term 0 from the start, with the zero fence (which matches
// only a lease row no cluster node was ever elected into).
type SingleNode struct{}

// NewSingleNode returns the props of the single-node leadership actor.
func NewSingleNode() *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &SingleNode{} })
}

// Receive implements actor.Actor.
func (SingleNode) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*actor.Started); ok {
		ctx.Send(ctx.Parent(), Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	}
}

package leadership

import (
	"time"

	"github.com/messagefoundry/mf/storage"
)

// LeaderOf derives the one live leader from the membership rows, as
// /cluster/nodes reports it: among the nodes flagged leader, active, and seen
// within nodeTimeout of the database clock, the one seen last. A crashed
// leader whose row still carries the flag is filtered out by its stale
// last_seen, and during a failover, when an old leader's flag is not yet
// cleared while the new one's is set, the freshest wins: never two, never a
// dead node. "" when there is none (for instance in the heartbeat after a
// promotion, before the new leader's flag is written).
func LeaderOf(l storage.NodeList, nodeTimeout time.Duration) string {
	var best *storage.Node
	for i := range l.Nodes {
		n := &l.Nodes[i]
		if !n.IsLeader || n.Status != storage.NodeActive || l.DBNow.Sub(n.LastSeen) > nodeTimeout {
			continue
		}
		if best == nil || n.LastSeen.After(best.LastSeen) {
			best = n
		}
	}
	if best == nil {
		return ""
	}
	return best.NodeID
}

package api

import (
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// ClusterStatus is GET /cluster/status: this node's posture, from its own
// memory (the per-node authoritative leadership signal).
type ClusterStatus struct {
	NodeID        string `json:"node_id"`
	Clustered     bool   `json:"clustered"`
	IsLeader      bool   `json:"is_leader"`
	Role          string `json:"role"` // primary, standby or single-node
	ConfigVersion int64  `json:"config_version"`
	// Term is the leader term this node works under (0 when not leading,
	// or single-node). It follows the reference's fields.
	Term int64 `json:"term"`
}

// ClusterNodes is GET /cluster/nodes: every node and the derived leader.
type ClusterNodes struct {
	Nodes []NodeEntry `json:"nodes"`
	// LeaderNodeID is the one live leader by the freshness rule, or null.
	LeaderNodeID *string `json:"leader_node_id"`
	// LeaseOwner and LeaseExpiresAt are the leader lease row itself: who
	// may process, and until when (epoch seconds on the database clock).
	LeaseOwner     *string  `json:"lease_owner"`
	LeaseExpiresAt *float64 `json:"lease_expires_at"`
}

// DBNowHeader is the header of a clustered node's /cluster/nodes answer
// that holds the database's clock when the nodes were read (epoch seconds):
// what a client counts ages and the lease's time left from, since its own
// clock may be off. A header, so that the body keeps reference 000's shape.
const DBNowHeader = "MF-DB-Now"

// NodeEntry is one node of ClusterNodes. Times are epoch seconds. IsLeader
// is true for the node LeaderNodeID names and no other (reference 000: the
// array never shows two leaders, never a dead one).
type NodeEntry struct {
	NodeID    string   `json:"node_id"`
	Host      string   `json:"host"`
	PID       int64    `json:"pid"`
	Status    string   `json:"status"`
	StartedAt *float64 `json:"started_at"`
	LastSeen  *float64 `json:"last_seen"`
	IsLeader  bool     `json:"is_leader"`
}

// Roles a node reports in ClusterStatus.Role.
const (
	RolePrimary    = "primary"
	RoleStandby    = "standby"
	RoleSingleNode = "single-node"
)

func epoch(t time.Time) *float64 {
	if t.IsZero() {
		return nil
	}
	f := float64(t.UnixMicro()) / 1e6
	return &f
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s *Server) clusterStatus(w http.ResponseWriter, r *http.Request) {
	st := s.o.Status()
	role := RoleSingleNode
	if st.Clustered {
		role = RoleStandby
		if st.Leader {
			role = RolePrimary
		}
	}
	// A single node leads while its graph runs, as a primary does: not
	// while it waits for its database (README), when mf_is_leader is 0.
	writeJSON(w, http.StatusOK, ClusterStatus{
		NodeID: st.NodeID, Clustered: st.Clustered, IsLeader: st.Leader,
		Role: role, ConfigVersion: st.ConfigVersion, Term: st.Fence.Term,
	})
}

func (s *Server) clusterNodes(w http.ResponseWriter, r *http.Request) {
	st := s.o.Status()
	if !st.Clustered {
		// A single node has no heartbeat history: the synthetic self-entry
		// of the reference. It leads as /cluster/status says, while its
		// graph runs: said to lead while it still waited for its database,
		// it answered a client that pins on leader_node_id otherwise than
		// one that reads is_leader.
		host, _ := os.Hostname()
		out := ClusterNodes{Nodes: []NodeEntry{{NodeID: st.NodeID, Host: host, PID: int64(os.Getpid()), Status: storage.NodeActive, IsLeader: st.Leader}}}
		if st.Leader {
			out.LeaderNodeID, out.LeaseOwner = &st.NodeID, &st.NodeID
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	ctx, cancel := storeCtx(r, s.limits.storeRead)
	defer cancel()
	list, err := s.o.Store.NodeList(ctx)
	if err != nil {
		s.storeFailed(w, "node list", err)
		return
	}
	lease, err := s.o.Store.LeaseRead(ctx)
	if err != nil {
		s.storeFailed(w, "lease read", err)
		return
	}
	s.readWorked()
	leader := leadership.LeaderOf(list, s.o.Config.Cluster.NodeTimeout())
	out := ClusterNodes{Nodes: []NodeEntry{}, LeaderNodeID: strPtr(leader)}
	for _, n := range list.Nodes {
		// The derived leader, not the row's flag: a crashed leader's row
		// keeps its flag for good, and during a failover two rows carry it.
		out.Nodes = append(out.Nodes, NodeEntry{
			NodeID: n.NodeID, Host: n.Host, PID: n.PID, Status: n.Status,
			StartedAt: epoch(n.StartedAt), LastSeen: epoch(n.LastSeen), IsLeader: leader != "" && n.NodeID == leader,
		})
	}
	if lease.Term > 0 { // never elected: no owner, no expiry
		out.LeaseOwner, out.LeaseExpiresAt = strPtr(lease.Owner), epoch(lease.ExpiresAt)
	}
	db := list.DBNow
	if db.IsZero() { // no node listed: the lease read's clock, as good
		db = lease.DBNow
	}
	if now := epoch(db); now != nil {
		w.Header().Set(DBNowHeader, strconv.FormatFloat(*now, 'f', 6, 64))
	}
	writeJSON(w, http.StatusOK, out)
}

package leadership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
)

// NewNodeID returns a node id for this process, host:pid:random-hex. It is
// new at every start, so a restarted process never mistakes its
// predecessor's row leases for its own.
func NewNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// NewInstanceID names one run of a node: nodeID plus a random suffix. Row
// leases belong to the instance, not the node, so that a node with a pinned
// node_id restarted after a crash sees its previous run's in-flight rows as
// another owner's and recovers them at once.
func NewInstanceID(nodeID string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return nodeID + "#" + hex.EncodeToString(b[:])
}

// CheckNodeIDFree refuses to start a node under a pinned node_id that a
// running process already uses (a config file copied to a new host, node_id
// and all). Two processes under one id write one mf_nodes row in turn, so
// the cluster's view of its nodes and its leader is wrong, and the first to
// stop marks the other left. The lease and row leases stay safe either way
// (terms and instance ids tell the two apart): this is for the operator.
//
// A row of the id that is active, fresh and written by another pid of this
// host that is not running was a run of this node that crashed: it starts.
// Written by another host, or a pid that runs, it is either that running
// node or a run of this node that crashed moments ago; only a later
// heartbeat tells them apart. So the check waits, polling
// every half heartbeat, until the row's last_seen moves (a live node: the
// error) or node_timeout_seconds have passed since it was last written (the
// definition of a dead node: start). A crashed node's lease holds the
// election for about as long anyway.
func CheckNodeIDFree(ctx context.Context, store storage.Store, cl config.Cluster, nodeID string, log zerolog.Logger) error {
	host, _ := os.Hostname()
	pid := int64(os.Getpid())
	var first *storage.Node
	for {
		l, err := store.NodeList(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Best effort: membership never decides who leads.
			log.Warn().Err(err).Msg("could not read mf_nodes to check that no running node has this node_id; starting anyway")
			return nil
		}
		var row *storage.Node
		for i := range l.Nodes {
			if l.Nodes[i].NodeID == nodeID {
				row = &l.Nodes[i]
			}
		}
		if row == nil || row.Status != "active" || (row.Host == host && row.PID == pid) {
			return nil
		}
		if row.Host == host && processGone(row.PID) {
			// A run of this node on this host that ended without leaving
			// (kill -9, a crash, and a restart by systemd moments after):
			// no need to wait for it to beat again.
			return nil
		}
		if first == nil {
			first = row
			if l.DBNow.Sub(row.LastSeen) >= cl.NodeTimeout() {
				return nil
			}
			log.Info().Str("host", row.Host).Int64("pid", row.PID).Dur("seen_ago", l.DBNow.Sub(row.LastSeen)).
				Msg("this node_id was seen moments ago from another process: waiting up to node_timeout_seconds to tell a crashed run of this node from a running node with the same node_id")
		} else if row.LastSeen.After(first.LastSeen) {
			return fmt.Errorf("config: cluster.node_id %q is in use by a running node (host %s, pid %d, seen %.1fs ago): give every node its own node_id, or leave node_id out for one of host:pid:random",
				nodeID, row.Host, row.PID, l.DBNow.Sub(row.LastSeen).Seconds())
		} else if l.DBNow.Sub(first.LastSeen) >= cl.NodeTimeout() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cl.Heartbeat() / 2):
		}
	}
}

package leadership

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
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

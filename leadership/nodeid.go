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

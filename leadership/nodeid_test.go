package leadership_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/leadership"
)

// A node id left to its default is host:pid:hex (reference 000), new at
// every start; the instance id of a run is the node id and a suffix of its
// own, so that a pinned node id restarted after a crash owns none of its
// previous run's row leases.
func TestDefaultNodeIDIsHostPIDHex(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	id := leadership.NewNodeID()
	want := regexp.MustCompile("^" + regexp.QuoteMeta(host+":"+strconv.Itoa(os.Getpid())+":") + "[0-9a-f]{8}$")
	if !want.MatchString(id) {
		t.Fatalf("node id %q, want %s", id, want)
	}
	if again := leadership.NewNodeID(); again == id {
		t.Fatalf("two node ids alike: %q", id)
	}
	a, b := leadership.NewInstanceID("node-a"), leadership.NewInstanceID("node-a")
	if a == b || !strings.HasPrefix(a, "node-a#") || !strings.HasPrefix(b, "node-a#") {
		t.Fatalf("instance ids of node-a: %q and %q; want two, each node-a#…", a, b)
	}
}

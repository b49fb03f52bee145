package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// timing is a [cluster] timing: heartbeat < fence timeout < lease TTL.
type timing struct{ heartbeat, fence, ttl time.Duration }

// fast is the timing of most cluster tests.
var fast = timing{200 * time.Millisecond, 500 * time.Millisecond, time.Second}

func (tm timing) toml() string {
	return fmt.Sprintf("heartbeat_seconds = %g\nleader_fence_timeout_seconds = %g\nleader_lease_ttl_seconds = %g\nnode_timeout_seconds = %g\n",
		tm.heartbeat.Seconds(), tm.fence.Seconds(), tm.ttl.Seconds(), tm.ttl.Seconds())
}

// cluster is N mf processes on one PostgreSQL schema, delivering to one
// MLLP destination.
type cluster struct {
	t      *testing.T
	url    string // the schema's URL
	timing timing
	nodes  []*engine
	dest   *receiver
	admin  storage.Store
	// edit, if set, changes the config file of the node it names before
	// the node starts (a node whose file differs from the others').
	edit func(id, cfg string) string
}

// startCluster starts n nodes, node-0 … node-n-1, and waits for a primary.
func startCluster(t *testing.T, n int, tm timing) *cluster {
	t.Helper()
	c := newCluster(t, tm)
	for i := 0; i < n; i++ {
		c.addNode(c.url)
	}
	c.waitForPrimary(-1)
	// The primary can be up before a standby has started at all (under
	// -race on a busy machine the standby's API once refused a test's first
	// request): every node's API answers before the cluster is handed over.
	for i, e := range c.nodes {
		waitFor(t, fmt.Sprintf("node-%d's API", i), 30*time.Second, func() bool {
			code, _, err := e.get("/cluster/status")
			return err == nil && code == http.StatusOK
		})
	}
	return c
}

func newCluster(t *testing.T, tm timing) *cluster {
	t.Helper()
	c := &cluster{t: t, url: pgtest.NewSchema(t), timing: tm, dest: startReceiver(t, "")}
	admin, err := postgres.Open(context.Background(), postgres.Options{URL: c.url, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	c.admin = admin
	return c
}

// addNode launches one more node whose store URL is storeURL (the schema's,
// or a proxy's in front of it).
func (c *cluster) addNode(storeURL string) *engine {
	c.t.Helper()
	return c.addNodeAs(storeURL, fmt.Sprintf("node-%d", len(c.nodes)))
}

// rowLease and reclaimEvery are the nodes' lease of a row claimed
// (store.lease_ttl_seconds) and their sweep of expired leases
// (cluster.reclaim_interval_seconds).
const (
	rowLease     = 5 * time.Second
	reclaimEvery = time.Second
)

// addNodeAs launches one more node under the node_id id.
func (c *cluster) addNodeAs(storeURL, id string) *engine {
	c.t.Helper()
	apiAddr := freePortNoT()
	cfg := `
[store]
backend = "postgres"
url = "` + storeURL + `"
pool_size = 4
lease_ttl_seconds = ` + fmt.Sprint(rowLease.Seconds()) + `

[cluster]
enabled = true
node_id = "` + id + `"
reclaim_interval_seconds = ` + fmt.Sprint(reclaimEvery.Seconds()) + `
` + c.timing.toml() + `
[api]
listen = "` + apiAddr + `"
[[api.tokens]]
name = "test"
role = "viewer"
sha256 = "` + viewerTokenSHA + `"

[[inbound]]
name = "adt_in"
type = "mllp"
listen = "{{listen}}"

[[outbound]]
name = "lab"
type = "mllp"
address = "` + c.dest.addr() + `"
timeout_seconds = 2
retry_base_seconds = 0.1
retry_max_seconds = 0.5

[[route]]
from = "adt_in"
to = ["lab"]
lane_key = "PID-3.1"
`
	if c.edit != nil {
		cfg = c.edit(id, cfg)
	}
	e := newEngine(c.t, cfg)
	e.api = "http://" + apiAddr
	e.launch()
	c.nodes = append(c.nodes, e)
	return e
}

// viewerToken is the API token every cluster node accepts (role viewer).
const (
	viewerToken    = "e2e-viewer-token"
	viewerTokenSHA = "667da53dbb3834e0b648a640ce71af319cc8ab45423f583878eb5dc436b61971" // sha256 of viewerToken
)

// get fetches an API path of the node with the viewer token.
func (e *engine) get(path string) (int, []byte, error) {
	req, _ := http.NewRequest("GET", e.api+path, nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// primaries lists the nodes whose MLLP port accepts connections now.
func (c *cluster) primaries() []int {
	var out []int
	for i, n := range c.nodes {
		if n.accepts() {
			out = append(out, i)
		}
	}
	return out
}

// waitForPrimary waits until exactly one node, not counting node not,
// accepts MLLP, and acknowledges a message AA; it returns that node. Node
// not is left out because a frozen (SIGSTOPped) process's listening socket
// still completes TCP handshakes in the kernel.
func (c *cluster) waitForPrimary(not int) int {
	c.t.Helper()
	p := -1
	waitFor(c.t, "a primary that acknowledges", 30*time.Second, func() bool {
		var ps []int
		for _, i := range c.primaries() {
			if i != not {
				ps = append(ps, i)
			}
		}
		if len(ps) != 1 {
			return false
		}
		p = ps[0]
		return c.acks(p)
	})
	return p
}

// acks reports whether node i answers a probe message AA.
func (c *cluster) acks(i int) bool {
	conn, err := net.DialTimeout("tcp", c.nodes[i].listen, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if hl7.WriteFrame(conn, adt("PROBE", "PROBE")) != nil {
		return false
	}
	b, err := hl7.NewFrameReader(conn, 1<<20).ReadFrame()
	if err != nil {
		return false
	}
	ack, err := hl7.ParseAck(b)
	return err == nil && ack.Code == hl7.AA
}

// term returns the leader lease's term.
func (c *cluster) term(t testing.TB) int64 {
	t.Helper()
	l, err := c.admin.LeaseRead(context.Background())
	if err != nil {
		t.Fatalf("reading the lease: %v", err)
	}
	return l.Term
}

func (c *cluster) nodeList() storage.NodeList {
	c.t.Helper()
	l, err := c.admin.NodeList(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

// vipLoad is a sender that, like a partner behind a VIP, sends each message
// to whichever node accepts, reconnecting and resending until it gets AA.
// Lane p's messages go over connection p % conns, in order.
type vipLoad struct {
	*load
	c    *cluster
	stop chan struct{}
	done sync.WaitGroup
	// resent counts, per lane, the copies sent again after a write that got
	// no AA: each may have been stored with its ACK lost in the kill, so it
	// is a second row of the same message, delivered right after the first.
	resent map[string]int
}

func startVIPLoad(c *cluster, patients, conns int) *vipLoad {
	v := &vipLoad{load: newLoad(50_000, patients, conns), c: c, stop: make(chan struct{}), resent: map[string]int{}}
	for k := 0; k < conns; k++ {
		v.done.Add(1)
		go v.run(k)
	}
	return v
}

func (v *vipLoad) run(k int) {
	defer v.done.Done()
	var conn net.Conn
	var fr *hl7.FrameReader
	next := 0 // the node to try first; moves past a node that failed us
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for i := 0; i < v.n; i++ {
		p := i % v.patients
		if p%v.conns != k {
			continue
		}
		// wrote: a copy of message i may already be stored.
		wrote := false
		for { // until this message is acknowledged AA
			select {
			case <-v.stop:
				return
			default:
			}
			if conn == nil {
				for j := range v.c.nodes {
					n := v.c.nodes[(next+j)%len(v.c.nodes)]
					if c, err := net.DialTimeout("tcp", n.listen, 100*time.Millisecond); err == nil {
						conn, fr = c, hl7.NewFrameReader(c, 1<<20)
						next = (next + j) % len(v.c.nodes)
						break
					}
				}
				if conn == nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
			}
			conn.SetDeadline(time.Now().Add(3 * time.Second))
			var ack hl7.Acknowledgment
			if wrote {
				v.mu.Lock()
				v.resent[patient(p)]++
				v.mu.Unlock()
			}
			wrote = true // even a failed write may have reached the engine whole
			err := hl7.WriteFrame(conn, adt(controlID(i), patient(p)))
			if err == nil {
				var b []byte
				if b, err = fr.ReadFrame(); err == nil {
					ack, err = hl7.ParseAck(b)
				}
			}
			if err == nil && ack.Code == hl7.AA {
				v.mu.Lock()
				v.acked[controlID(i)] = true
				v.mu.Unlock()
				break
			}
			conn.Close() // dropped at failover, or AE: resend to the primary
			conn = nil
			next++
		}
	}
}

// resends returns how many copies of lane p's messages were sent again.
func (v *vipLoad) resends(p string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.resent[p]
}

func (v *vipLoad) finish() {
	close(v.stop)
	v.done.Wait()
}

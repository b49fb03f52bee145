package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// membershipStore answers NodeList and LeaseRead with fixed rows.
type membershipStore struct {
	storage.Store
	list  storage.NodeList
	lease storage.Lease
}

func (s membershipStore) NodeList(context.Context) (storage.NodeList, error) { return s.list, nil }
func (s membershipStore) LeaseRead(context.Context) (storage.Lease, error)   { return s.lease, nil }

// After a kill -9 of the primary its row keeps the leader flag for good (no
// clean stop cleared it), and the new primary's row carries the flag too.
// /cluster/nodes names the live leader in leader_node_id and in the array
// alike: one entry is_leader, the live one (reference 000: "the array never
// shows two leaders and never names a dead node"). Before, the array showed
// the row's raw flag: two leaders, one of them dead, from the first
// failover on.
func TestClusterNodesArrayShowsOnlyTheLiveLeader(t *testing.T) {
	v := start(t, fileOutbound)
	now := time.Now()
	st := membershipStore{Store: v.e.Store,
		list: storage.NodeList{DBNow: now, Nodes: []storage.Node{
			{NodeID: "node-a", Host: "a", PID: 1, Status: storage.NodeActive, StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-10 * time.Minute), IsLeader: true},
			{NodeID: "node-b", Host: "b", PID: 2, Status: storage.NodeActive, StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-time.Second), IsLeader: true},
			{NodeID: "node-c", Host: "c", PID: 3, Status: storage.NodeActive, StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-time.Second)},
		}},
		lease: storage.Lease{Owner: "node-b", Term: 2, ExpiresAt: now.Add(30 * time.Second), DBNow: now},
	}
	clustered := func() actors.Status { s := v.e.Status(); s.Clustered = true; return s }
	srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: st, Status: clustered, Log: zerolog.Nop()}).Handler())
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("GET", srv.URL+"/cluster/nodes", nil)
	req.Header.Set("Authorization", "Bearer "+tokens["viewer"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got api.ClusterNodes
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /cluster/nodes: %d %v", resp.StatusCode, err)
	}
	if got.LeaderNodeID == nil || *got.LeaderNodeID != "node-b" {
		t.Fatalf("leader_node_id %v, want node-b", got.LeaderNodeID)
	}
	var leaders []string
	for _, n := range got.Nodes {
		if n.IsLeader {
			leaders = append(leaders, n.NodeID)
		}
	}
	if len(leaders) != 1 || leaders[0] != "node-b" {
		t.Fatalf("entries with is_leader: %v; want only node-b (node-a crashed 10 minutes ago with its flag set)", leaders)
	}
}

// /cluster/nodes carries the database's clock at the read (a header, so
// that the body keeps the reference's shape), so that a client can tell how
// long ago a node was seen and how long the lease has left without its own
// clock: every other time in the answer is the database's. Here the
// database's clock is an hour behind this process's; there was no such
// clock in the answer, and mf nodes counted from its own.
func TestClusterNodesCarriesTheDatabaseClock(t *testing.T) {
	v := start(t, fileOutbound)
	db := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	lease := storage.Lease{Owner: "node-a", Term: 1, ExpiresAt: db.Add(20 * time.Second), DBNow: db}
	for name, list := range map[string]storage.NodeList{
		"nodes listed": {DBNow: db, Nodes: []storage.Node{
			{NodeID: "node-a", Host: "a", PID: 1, Status: storage.NodeActive, StartedAt: db.Add(-time.Minute), LastSeen: db.Add(-time.Second), IsLeader: true},
		}},
		"none listed (the lease read's clock)": {},
	} {
		st := membershipStore{Store: v.e.Store, list: list, lease: lease}
		clustered := func() actors.Status { s := v.e.Status(); s.Clustered = true; return s }
		srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: st, Status: clustered, Log: zerolog.Nop()}).Handler())
		req, _ := http.NewRequest("GET", srv.URL+"/cluster/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+tokens["viewer"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: GET /cluster/nodes: %s", name, resp.Status)
		}
		want := strconv.FormatFloat(float64(db.UnixMicro())/1e6, 'f', 6, 64)
		if got := resp.Header.Get(api.DBNowHeader); got != want {
			t.Errorf("%s: %s %q, want %s (the database's clock at the read)", name, api.DBNowHeader, got, want)
		}
	}
}

// getJSON does a GET as a viewer against srv and decodes the answer.
func getJSON(t *testing.T, srv *httptest.Server, path string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+tokens["viewer"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return got
}

// /cluster/status names the role as reference 000 does: a clustered node
// is primary while it leads and standby otherwise, a single node is
// single-node (a load balancer or an alert reads role and is_leader).
func TestClusterStatusRole(t *testing.T) {
	v := start(t, fileOutbound)
	for _, tt := range []struct {
		clustered, leader bool
		role              string
	}{{false, true, "single-node"}, {true, true, "primary"}, {true, false, "standby"}} {
		status := func() actors.Status { s := v.e.Status(); s.Clustered, s.Leader = tt.clustered, tt.leader; return s }
		srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: status, Log: zerolog.Nop()}).Handler())
		got := getJSON(t, srv, "/cluster/status")
		srv.Close()
		if got["role"] != tt.role || got["is_leader"] != tt.leader || got["clustered"] != tt.clustered {
			t.Errorf("clustered %v, leader %v: /cluster/status %v; want role %q", tt.clustered, tt.leader, got, tt.role)
		}
	}
}

// A single node's /cluster/nodes says what its /cluster/status says: it
// leads while its graph runs, not while it waits for its database (its
// self-entry then leads no one, and leader_node_id is null).
func TestSingleNodeNodesAgreeWithStatus(t *testing.T) {
	v := start(t, fileOutbound)
	for _, leader := range []bool{true, false} {
		status := func() actors.Status { s := v.e.Status(); s.Clustered, s.Leader = false, leader; return s }
		srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: status, Log: zerolog.Nop()}).Handler())
		st, nodes := getJSON(t, srv, "/cluster/status"), getJSON(t, srv, "/cluster/nodes")
		srv.Close()
		list, _ := nodes["nodes"].([]any)
		if len(list) != 1 {
			t.Fatalf("leader %v: /cluster/nodes %v; want the self-entry", leader, nodes)
		}
		self, _ := list[0].(map[string]any)
		wantID := any(nil)
		if leader {
			wantID = st["node_id"]
		}
		if st["is_leader"] != leader || self["is_leader"] != leader || nodes["leader_node_id"] != wantID || nodes["lease_owner"] != wantID {
			t.Errorf("leader %v: /cluster/status %v, /cluster/nodes %v; want both to say is_leader %v and leader_node_id %v", leader, st, nodes, leader, wantID)
		}
	}
}

// A cluster with no live leader and a lease never taken (every node just
// started, or the database is new) answers /cluster/nodes with nulls, as
// reference 000 does: leader_node_id, lease_owner and lease_expires_at are
// null, not "" or the zero time (a client tests them for null).
func TestClusterNodesWithoutALeaderIsNull(t *testing.T) {
	v := start(t, fileOutbound)
	now := time.Now()
	st := membershipStore{Store: v.e.Store,
		list: storage.NodeList{DBNow: now, Nodes: []storage.Node{
			{NodeID: "node-a", Host: "a", PID: 1, Status: storage.NodeActive, StartedAt: now.Add(-time.Minute), LastSeen: now.Add(-time.Second)},
		}},
		lease: storage.Lease{DBNow: now},
	}
	clustered := func() actors.Status { s := v.e.Status(); s.Clustered = true; return s }
	srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: st, Status: clustered, Log: zerolog.Nop()}).Handler())
	t.Cleanup(srv.Close)
	got := getJSON(t, srv, "/cluster/nodes")
	for _, k := range []string{"leader_node_id", "lease_owner", "lease_expires_at"} {
		if v, ok := got[k]; !ok || v != nil {
			t.Errorf("%s = %#v (present %v); want null", k, v, ok)
		}
	}
}

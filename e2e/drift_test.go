package e2e

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// sharedRoute is a line of every cluster node's route; driftedRoute is what
// the drifted node's file has instead: its route takes only ORU messages,
// so as primary it would leave every ADT unrouted.
const (
	sharedRoute  = `lane_key = "PID-3.1"`
	driftedRoute = sharedRoute + "\nfilter = { \"MSH-9.1\" = \"ORU\" }"
)

// configDrift reads a node's mf_config_drift: "" when it has no such series.
func configDrift(t *testing.T, e *engine) string {
	t.Helper()
	code, b, err := e.get("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "mf_config_drift "); ok {
			return v
		}
	}
	return ""
}

// nodeRow returns node id's row of mf_nodes.
func nodeRow(c *cluster, id string) (storage.Node, bool) {
	for _, n := range c.nodeList().Nodes {
		if n.NodeID == id {
			return n, true
		}
	}
	return storage.Node{}, false
}

// driftWarnings are the primary's WARN lines about node id's graph config.
func driftWarnings(e *engine, id string) string {
	var out []string
	for _, l := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, `"other_node":"`+id+`"`) &&
			strings.Contains(l, "differs from this primary's") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A node whose file differs from the others' in one route is reported while
// it is still a standby: the primary logs a WARN naming it, its
// mf_config_drift is 1; nodes with the same file (other ports: the listen
// addresses are each node's own) have the same fingerprint, no WARN and
// 0. Once its file is fixed and mf reload run, it is 0 again.
func TestClusterReportsANodeWhoseRoutesDiffer(t *testing.T) {
	t.Parallel()
	c := newCluster(t, fast)
	c.edit = func(id, cfg string) string {
		// An operator's token ([api] is each node's own: not in the
		// fingerprint), to resend through each.
		cfg = strings.Replace(cfg, "\n[[inbound]]", fmt.Sprintf("\n[[api.tokens]]\nname = \"op\"\nrole = \"operator\"\nsha256 = \"%x\"\n\n[[inbound]]", sha256.Sum256([]byte(operatorToken))), 1)
		if id == "node-2" {
			return strings.Replace(cfg, sharedRoute, driftedRoute, 1)
		}
		return cfg
	}
	c.addNode(c.url)
	if p := c.waitForPrimary(-1); p != 0 {
		t.Fatalf("node-%d is primary; want node-0, the only node", p)
	}
	c.addNode(c.url)

	// Same file: one fingerprint, recorded by both.
	var seen storage.Node
	waitFor(t, "node-0 and node-1 to report their fingerprints", 30*time.Second, func() bool {
		a, okA := nodeRow(c, "node-0")
		b, okB := nodeRow(c, "node-1")
		seen = a
		return okA && okB && a.ConfigFingerprint != "" && b.ConfigFingerprint != ""
	})
	a, _ := nodeRow(c, "node-0")
	b, _ := nodeRow(c, "node-1")
	if a.ConfigFingerprint != b.ConfigFingerprint {
		t.Fatalf("two nodes with the same file (but their listen ports) report fingerprints %q and %q", a.ConfigFingerprint, b.ConfigFingerprint)
	}
	// The primary's check runs before each of its beats: three beats more
	// have compared node-1's row with its own at least twice.
	waitFor(t, "three more beats of the primary", 10*time.Second, func() bool {
		n, _ := nodeRow(c, "node-0")
		return n.LastSeen.Sub(seen.LastSeen) >= 3*c.timing.heartbeat
	})
	for i := 0; i < 2; i++ {
		if v := configDrift(t, c.nodes[i]); v != "0" {
			t.Fatalf("node-%d's mf_config_drift is %q with the same file as the primary; want 0", i, v)
		}
	}
	if w := driftWarnings(c.nodes[0], "node-1"); w != "" {
		t.Fatalf("the primary warns of node-1, which has its file:\n%s", w)
	}

	// One route differs.
	c.addNode(c.url)
	waitFor(t, "the primary's WARN naming node-2", 30*time.Second, func() bool {
		return driftWarnings(c.nodes[0], "node-2") != ""
	})
	w := driftWarnings(c.nodes[0], "node-2")
	host, _ := os.Hostname()
	for _, want := range []string{`"other_host":"` + host + `"`, "deploy the same config file to every node, then run mf reload"} {
		if !strings.Contains(w, want) {
			t.Fatalf("the primary's WARN lacks %q:\n%s", want, w)
		}
	}
	waitFor(t, "node-2's mf_config_drift to be 1", 10*time.Second, func() bool { return configDrift(t, c.nodes[2]) == "1" })
	for i := 0; i < 2; i++ {
		if v := configDrift(t, c.nodes[i]); v != "0" {
			t.Fatalf("node-%d's mf_config_drift is %q; want 0 (only node-2's file differs)", i, v)
		}
	}
	if w := driftWarnings(c.nodes[0], "node-1"); w != "" {
		t.Fatalf("the primary warns of node-1, which has its file:\n%s", w)
	}
	if n := strings.Count(w, "\n") + 1; n != 1 {
		t.Fatalf("the primary warned of node-2 %d times within seconds; want once a minute:\n%s", n, w)
	}
	// Its API refuses a resend, which would lane by its own routes; the
	// primary's takes it.
	if code, body := apiDo(t, c.nodes[2], "POST", "/outbounds/lab/resend-dead", operatorToken); code != http.StatusConflict || !strings.Contains(string(body), "differs from the primary's") {
		t.Fatalf("resend-dead through node-2, whose config drifted: %d %s; want 409 saying so", code, body)
	}
	if code, body := apiDo(t, c.nodes[0], "POST", "/outbounds/lab/resend-dead", operatorToken); code != http.StatusOK {
		t.Fatalf("resend-dead through the primary: %d %s; want 200", code, body)
	}

	// Fixed and reloaded: the config in force is reported, and it matches.
	b2, err := os.ReadFile(c.nodes[2].config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.nodes[2].config, []byte(strings.Replace(string(b2), driftedRoute, sharedRoute, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mfBin, "reload", "--config", c.nodes[0].config).CombinedOutput(); err != nil {
		t.Fatalf("mf reload: %v\n%s", err, out)
	}
	waitFor(t, "node-2's mf_config_drift to be 0 after the reload", 10*time.Second, func() bool { return configDrift(t, c.nodes[2]) == "0" })
	if code, body := apiDo(t, c.nodes[2], "POST", "/outbounds/lab/resend-dead", operatorToken); code != http.StatusOK {
		t.Fatalf("resend-dead through node-2 once it runs the primary's config: %d %s; want 200", code, body)
	}
	waitFor(t, "the primary to say node-2 runs its config again", 10*time.Second, func() bool {
		for _, l := range strings.Split(c.nodes[0].logs.String(), "\n") {
			if strings.Contains(l, `"other_node":"node-2"`) && strings.Contains(l, "this node runs the primary's graph config again") {
				return true
			}
		}
		return false
	})
	a, _ = nodeRow(c, "node-0")
	n2, _ := nodeRow(c, "node-2")
	if n2.ConfigFingerprint != a.ConfigFingerprint {
		t.Fatalf("after the fix and reload node-2 reports %q, the primary %q", n2.ConfigFingerprint, a.ConfigFingerprint)
	}
}

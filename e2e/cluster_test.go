package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/storage"
)

// With two and with three nodes, at every sample over 30 s exactly one node
// is primary: its MLLP port accepts, every standby's refuses, and it is the
// holder of the lease.
func TestClusterHasExactlyOnePrimary(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, n, fast)
			first := c.primaries()[0]
			samples := 0
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); samples++ {
				ps := c.primaries()
				if len(ps) != 1 {
					t.Fatalf("sample %d: nodes %v accept MLLP; want exactly one", samples, ps)
				}
				if ps[0] != first {
					t.Fatalf("sample %d: the primary moved from node-%d to node-%d in a healthy cluster", samples, first, ps[0])
				}
				l, err := c.admin.LeaseRead(context.Background())
				if err != nil || l.Owner != fmt.Sprintf("node-%d", first) || l.Remaining() <= 0 {
					t.Fatalf("sample %d: lease %+v (%v); want node-%d holding it", samples, l, err, first)
				}
				time.Sleep(100 * time.Millisecond) // the sampling period
			}
			t.Logf("%d samples over 30s: node-%d the only primary at each", samples, first)
		})
	}
}

// Kill -9 the primary: a standby binds the port and ACKs within the lease
// TTL plus a heartbeat (plus a margin for the process and CI).
func TestClusterKillNineFailover(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, fast)
	p := c.waitForPrimary(-1)
	start := time.Now()
	c.nodes[p].kill()
	q := c.waitForPrimary(p)
	took := time.Since(start)
	t.Logf("kill -9 failover, node-%d to node-%d: %v until the new primary acknowledged (ttl %v + heartbeat %v)",
		p, q, took.Round(time.Millisecond), c.timing.ttl, c.timing.heartbeat)
	if limit := c.timing.ttl + c.timing.heartbeat + 1500*time.Millisecond; took > limit {
		t.Fatalf("failover took %v, more than %v", took, limit)
	}
}

// SIGTERM the primary: it resigns and the followers, woken by NOTIFY, take
// over in well under one heartbeat (the polling alone would need up to one).
func TestClusterCleanStopHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	slow := timing{2 * time.Second, 4 * time.Second, 6 * time.Second}
	c := startCluster(t, 2, slow)
	p := c.waitForPrimary(-1)
	start := time.Now()
	c.nodes[p].signal(syscall.SIGTERM)
	q := c.waitForPrimary(p)
	took := time.Since(start)
	t.Logf("SIGTERM hand-over, node-%d to node-%d: %v until the new primary acknowledged (heartbeat %v)",
		p, q, took.Round(time.Millisecond), slow.heartbeat)
	if took > slow.heartbeat/2 {
		t.Fatalf("hand-over took %v: not well under one heartbeat (%v); is NOTIFY reaching the followers?", took, slow.heartbeat)
	}
	select {
	case <-c.nodes[p].exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the old primary did not exit after SIGTERM")
	}
	if code := c.nodes[p].cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the old primary exited %d", code)
	}
	for _, n := range c.nodeList().Nodes {
		if n.NodeID == fmt.Sprintf("node-%d", p) && (n.Status != storage.NodeLeft || n.IsLeader) {
			t.Fatalf("the stopped node's row: %+v; want a left tombstone", n)
		}
	}
}

// SIGSTOP the primary for longer than the lease TTL while messages flow,
// then SIGCONT it: a standby has taken over; the old primary fences itself
// and rejoins as a standby; nothing is lost and every lane stays in order.
func TestClusterPausedPrimaryFencesAndRejoins(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, fast)
	p := c.waitForPrimary(-1)
	load := startVIPLoad(c, 10, 5)
	waitFor(t, "some messages acked", 30*time.Second, func() bool { return load.ackedCount() >= 100 })

	c.nodes[p].signal(syscall.SIGSTOP)
	q := c.waitForPrimary(p)
	waitFor(t, "the new primary to take load", 30*time.Second, func() bool { return load.ackedCount() >= 300 })
	c.nodes[p].signal(syscall.SIGCONT)

	waitFor(t, "the resumed node to fence itself", 10*time.Second, func() bool {
		return strings.Contains(c.nodes[p].logs.String(), `"reason":"fenced"`) ||
			strings.Contains(c.nodes[p].logs.String(), `"reason":"renew-lost"`)
	})
	waitFor(t, "the resumed node to close its port", 10*time.Second, func() bool { return !c.nodes[p].accepts() })
	if ps := c.primaries(); len(ps) != 1 || ps[0] != q {
		t.Fatalf("after the resume, nodes %v accept; want only node-%d", ps, q)
	}
	if !strings.Contains(c.nodes[p].logs.String(), `"reason":"fenced"`) {
		t.Logf("note: the resumed node lost the lease by a failed renewal, not by its trust window")
	}
	load.finish()
	waitFor(t, "every acked message to be delivered", 60*time.Second, func() bool { return load.allDelivered(c.dest) })
	lanes := checkLanes(t, c.dest.received(), load.pos)
	t.Logf("%d messages acked; %d lanes delivered in order; resumed node's log:\n%s", load.ackedCount(), len(lanes),
		grepLines(c.nodes[p].logs.String(), "leadership", "fence"))
	waitFor(t, "the resumed node to rejoin as a standby", 10*time.Second, func() bool {
		for _, n := range c.nodeList().Nodes {
			if n.NodeID == fmt.Sprintf("node-%d", p) {
				return n.Status == storage.NodeActive && !n.IsLeader
			}
		}
		return false
	})
}

// Cut the primary's database connections: it fences within
// leader_fence_timeout, a standby is promoted once the lease expires, and
// the old primary's port is closed before the new primary's opens.
func TestClusterPartitionedPrimaryClosesBeforeTheNextOpens(t *testing.T) {
	t.Parallel()
	c := newCluster(t, fast)
	px := enginetest.StartProxy(t, enginetest.HostOf(t, c.url))
	a := c.addNode(px.Via(t, c.url))
	if p := c.waitForPrimary(-1); p != 0 {
		t.Fatalf("node-%d is primary; want node-0 (the only node)", p)
	}
	b := c.addNode(c.url)
	waitFor(t, "node-1 to join as a standby", 30*time.Second, func() bool { return len(c.nodeList().Nodes) == 2 })

	start := time.Now()
	px.Cut()
	var aClosed, bOpen time.Time
	waitFor(t, "node-0 to close its port and node-1 to open its", 30*time.Second, func() bool {
		now := time.Now()
		if aClosed.IsZero() && !a.accepts() {
			aClosed = now
		}
		if bOpen.IsZero() && b.accepts() {
			bOpen = now
		}
		return !aClosed.IsZero() && !bOpen.IsZero()
	})
	t.Logf("partitioned primary closed its port %v after the cut (fence timeout %v); the standby opened its %v after the cut (lease ttl %v)",
		aClosed.Sub(start).Round(time.Millisecond), c.timing.fence, bOpen.Sub(start).Round(time.Millisecond), c.timing.ttl)
	if !aClosed.Before(bOpen) {
		t.Fatalf("the new primary opened its port before the old one closed: two primaries")
	}
	if took := aClosed.Sub(start); took > c.timing.fence+500*time.Millisecond {
		t.Fatalf("the partitioned primary closed its port %v after the cut; want within the fence timeout %v (+0.5s)", took, c.timing.fence)
	}
	if !c.acks(1) {
		t.Fatal("the new primary does not acknowledge")
	}
}

// Ten kill -9 cycles of whichever node is primary, under load over 10 lanes:
// every message acked AA is delivered, each lane strictly in order, and a
// message repeats only right after itself (the head in flight at a kill).
func TestClusterTenKillCyclesLoseNothing(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, fast)
	load := startVIPLoad(c, 10, 5)
	for cycle := 0; cycle < 10; cycle++ {
		p := c.waitForPrimary(-1)
		before := load.ackedCount()
		waitFor(t, "load on the primary", 30*time.Second, func() bool { return load.ackedCount() >= before+50 })
		c.nodes[p].kill()
		c.nodes[p].launch() // back as a standby
	}
	c.waitForPrimary(-1)
	load.finish()
	waitFor(t, "every acked message to be delivered", 120*time.Second, func() bool { return load.allDelivered(c.dest) })
	waitFor(t, "the lanes to drain", 30*time.Second, func() bool {
		n := len(c.dest.received())
		time.Sleep(500 * time.Millisecond)
		return len(c.dest.received()) == n
	})
	lanes := checkLanes(t, c.dest.received(), load.pos)
	repeats := 0
	for p, r := range lanes {
		repeats += r.repeats
		if r.repeats > 10 {
			t.Fatalf("lane %s repeated %d messages over 10 kills; at most one per kill", p, r.repeats)
		}
	}
	t.Logf("10 kill -9 cycles: %d messages acked, all delivered, %d lanes in order, %d adjacent repeats",
		load.ackedCount(), len(lanes), repeats)
}

// mf reload on one node: every node reports the new config version within a
// heartbeat (and a margin).
func TestClusterReloadReachesEveryNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, fast)
	waitFor(t, "all three nodes in mf_nodes", 30*time.Second, func() bool { return len(c.nodeList().Nodes) == 3 })
	out, err := exec.Command(mfBin, "reload", "--config", c.nodes[1].config).CombinedOutput()
	if err != nil {
		t.Fatalf("mf reload: %v\n%s", err, out)
	}
	start := time.Now()
	var want int64
	if _, err := fmt.Sscanf(string(out), "config version %d", &want); err != nil {
		t.Fatalf("mf reload printed %q", out)
	}
	waitFor(t, "every node to report the new config version", 10*time.Second, func() bool {
		l := c.nodeList()
		for _, n := range l.Nodes {
			if n.ConfigVersion != want {
				return false
			}
		}
		return len(l.Nodes) == 3
	})
	took := time.Since(start)
	t.Logf("config version %d reported by every node %v after mf reload (heartbeat %v)", want, took.Round(time.Millisecond), c.timing.heartbeat)
	if took > c.timing.heartbeat+time.Second {
		t.Fatalf("took %v; want within a heartbeat (%v) and a margin", took, c.timing.heartbeat)
	}
	p := c.waitForPrimary(-1)
	if !c.acks(p) {
		t.Fatal("the primary does not acknowledge after reloading")
	}
}

// grepLines returns the lines of s containing any of words.
func grepLines(s string, words ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

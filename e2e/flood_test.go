package e2e

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
)

// rssMB reads a process's resident memory from /proc.
func rssMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

// A flood for 60 s: 64 senders each sending as fast as ACKs come back. The
// engine's memory stays bounded (under 300 MB) while the ACKs slow down
// (backpressure reaches the senders through their own ACKs and TCP), every
// acknowledged message is delivered in its lane's order, and no log line
// carries a patient's data.
func TestFloodSlowsSendersNotMemory(t *testing.T) {
	t.Parallel()
	const conns, secret = 64, "FLOODMRN"
	dest := startReceiver(t, "")
	e := startEngine(t, singleNode(dest.addr(), "connections = 4"))

	// The ACK latency of a lone sender on an idle engine.
	var idle []time.Duration
	cl := enginetest.Dial(t, e.listen)
	for i := 0; i < 50; i++ {
		start := time.Now()
		if ack, err := cl.TrySend(adt(fmt.Sprintf("IDLE%03d", i), "IDLE")); err != nil || ack.Code != "AA" {
			t.Fatalf("idle send: %v %v", ack, err)
		}
		idle = append(idle, time.Since(start))
	}

	var (
		mu      sync.Mutex
		lat     []time.Duration
		acked   = map[string]bool{}
		pos     = map[string]int{}
		stop    atomic.Bool
		wg      sync.WaitGroup
		maxRSS  float64
		samples int
	)
	for k := 0; k < conns; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := enginetest.Dial(t, e.listen)
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("F%02d-%06d", k, i)
				start := time.Now()
				ack, err := c.TrySend(adt(id, fmt.Sprintf("%s%02d", secret, k)))
				if err != nil {
					t.Errorf("sender %d: %v", k, err)
					return
				}
				mu.Lock()
				pos[id] = i
				if ack.Code == "AA" {
					acked[id] = true
					lat = append(lat, time.Since(start))
				}
				mu.Unlock()
			}
		}()
	}
	pid := e.cmd.Process.Pid
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); samples++ {
		maxRSS = max(maxRSS, rssMB(pid))
		time.Sleep(500 * time.Millisecond) // the sampling period
	}
	stop.Store(true)
	wg.Wait()

	t.Logf("flood: %d messages acked in 60 s over %d connections (%.0f/s); ACK latency p50 %v, p99 %v (idle engine: p50 %v); engine RSS max %.0f MB over %d samples",
		len(acked), conns, float64(len(acked))/60, percentile(lat, 0.5).Round(time.Microsecond), percentile(lat, 0.99).Round(time.Microsecond),
		percentile(idle, 0.5).Round(time.Microsecond), maxRSS, samples)
	if maxRSS == 0 || maxRSS > 300 {
		t.Fatalf("engine RSS reached %.0f MB; want under 300 MB", maxRSS)
	}
	if percentile(lat, 0.5) <= percentile(idle, 0.5) {
		t.Fatalf("ACK latency under flood (p50 %v) is not above the idle engine's (%v): the flood did not load the engine", percentile(lat, 0.5), percentile(idle, 0.5))
	}

	waitFor(t, "every acknowledged message to be delivered", 5*time.Minute, func() bool {
		got := map[string]bool{}
		for _, r := range dest.received() {
			got[r.ControlID] = true
		}
		for id := range acked {
			if !got[id] {
				return false
			}
		}
		return true
	})
	var flood []received
	for _, r := range dest.received() {
		if strings.HasPrefix(r.ControlID, "F") {
			flood = append(flood, r)
		}
	}
	lanes := checkLanes(t, flood, pos)
	if len(lanes) != conns {
		t.Fatalf("%d lanes delivered, want %d", len(lanes), conns)
	}
	logs := e.logs.String()
	if strings.Contains(logs, secret) {
		t.Fatalf("the engine's logs carry patient data:\n%s", grepLines(logs, secret))
	}
	t.Logf("all %d acknowledged messages delivered, %d lanes in order; %d log lines, none with the PID content",
		len(acked), len(lanes), strings.Count(logs, "\n"))
}

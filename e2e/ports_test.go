package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The ports of the processes the suite starts (mf nodes' MLLP and API
// ports, HAProxy, its own PostgreSQL) come from just below the kernel's
// ephemeral range, which neither a "127.0.0.1:0" listener nor an outgoing
// connection ever takes. Such a port is free for long stretches by design:
// a standby binds no MLLP port, a PostgreSQL being restarted none. Picked
// from the ephemeral range, another test's listener (a package running in
// parallel) could take it meanwhile, and a standby whose port answered for
// someone else looked like a second primary ("nodes [0 2] accept MLLP;
// want exactly one", with node-2's log showing no election).
var ports struct {
	sync.Mutex
	given map[int]bool // within this process, never handed out twice
}

// ephemeralLow is the first port of the kernel's ephemeral range: Linux's
// ip_local_port_range, else IANA's 49152 (macOS, Windows).
func ephemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil && low > 12000 {
				return low
			}
		}
	}
	return 49152
}

// portRange is the range reservedAddr picks from, [low, high): the 10,000
// ports below the ephemeral range, or MF_E2E_PORTS ("21000-21999", both
// ends included) where several runs share a machine and each keeps to a
// band of its own.
func portRange() (low, high int, err error) {
	if r := os.Getenv("MF_E2E_PORTS"); r != "" {
		a, b, ok := strings.Cut(r, "-")
		lo, err1 := strconv.Atoi(strings.TrimSpace(a))
		hi, err2 := strconv.Atoi(strings.TrimSpace(b))
		if !ok || err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
			return 0, 0, fmt.Errorf("MF_E2E_PORTS=%q: want LOW-HIGH, such as 21000-21999", r)
		}
		return lo, hi + 1, nil
	}
	high = ephemeralLow()
	return high - 10000, high, nil
}

// reservedAddr returns a loopback address, outside the ephemeral range,
// that nothing listens on now and that this process has not handed out.
func reservedAddr() (string, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
	}
	low, high, err := portRange()
	if err != nil {
		return "", err
	}
	for range 1000 {
		p := low + rand.IntN(high-low)
		if ports.given[p] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // another service's
		}
		l.Close()
		ports.given[p] = true
		return addr, nil
	}
	return "", fmt.Errorf("no free port in %d-%d after 1000 tries", low, high-1)
}

// The ports handed to the suite's processes are below the ephemeral range
// and never handed out twice, so no "127.0.0.1:0" listener of another test
// can take one while its process does not hold it.
func TestPortsForTheSuitesProcessesAreOutsideTheEphemeralRange(t *testing.T) {
	low, seen := ephemeralLow(), map[string]bool{}
	for range 200 {
		addr := freePort(t)
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port >= low {
			t.Fatalf("port %d is in the ephemeral range (from %d): a port the kernel may give any other listener", port, low)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
	}
}

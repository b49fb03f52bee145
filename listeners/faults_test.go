package listeners

import (
	"net"
	"testing"
	"time"
)

// A fault that recurs from one host is logged once a faultRepeat, with how
// many went unlogged; another host's, or another kind, is logged at once.
func TestARecurringFaultIsLoggedOnceAMinutePerHost(t *testing.T) {
	var f faults
	at := func(ip string, port int) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: port} }
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		kind, ip     string
		port         int
		after        time.Duration
		log          bool
		wantUnlogged int
	}{
		{"framing", "10.0.0.1", 40001, 0, true, 0},
		{"framing", "10.0.0.1", 40002, 5 * time.Second, false, 1}, // a new port: the same sender reconnecting
		{"framing", "10.0.0.1", 40003, 10 * time.Second, false, 2},
		{"framing", "10.0.0.2", 40001, 10 * time.Second, true, 0}, // another host
		{"tls", "10.0.0.1", 40004, 11 * time.Second, true, 0},     // another kind
		{"framing", "10.0.0.1", 40005, 61 * time.Second, true, 2}, // a minute on: logged, with the two between
		{"framing", "10.0.0.1", 40006, 62 * time.Second, false, 1},
	} {
		log, unlogged := f.note(step.kind, at(step.ip, step.port), t0.Add(step.after))
		if log != step.log || unlogged != step.wantUnlogged {
			t.Errorf("%s from %s:%d at +%s: log %v, %d unlogged; want %v, %d",
				step.kind, step.ip, step.port, step.after, log, unlogged, step.log, step.wantUnlogged)
		}
	}
}

// A scan from many hosts does not grow what is remembered without bound.
func TestFaultsRememberedAreBounded(t *testing.T) {
	var f faults
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for i := range 3 * maxFaultKeys {
		ip := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i))
		if log, _ := f.note("framing", &net.TCPAddr{IP: ip, Port: 1}, t0.Add(time.Duration(i)*time.Millisecond)); !log {
			t.Fatalf("host %d's first fault not logged", i)
		}
	}
	if n := len(f.seen); n > maxFaultKeys {
		t.Fatalf("%d faults remembered; want at most %d", n, maxFaultKeys)
	}
}

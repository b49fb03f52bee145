package listeners

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
)

// ephemeralHint adds, to a bind that failed with "address already in use",
// that the port lies in the range the host hands out to outgoing
// connections (Linux's net.ipv4.ip_local_port_range, 32768-60999 by
// default): such a port is taken, now and then, by a connection this host
// opened, with nothing listening on it, and "is the port taken" sent the
// operator looking for a listener that is not there.
func ephemeralHint(listen string, err error) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	_, p, splitErr := net.SplitHostPort(listen)
	port, convErr := strconv.Atoi(p)
	b, readErr := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if splitErr != nil || convErr != nil || readErr != nil {
		return ""
	}
	var lo, hi int
	if n, _ := fmt.Sscan(string(b), &lo, &hi); n != 2 || port < lo || port > hi {
		return ""
	}
	return fmt.Sprintf("; port %d is in this host's range for outgoing connections (net.ipv4.ip_local_port_range %d-%d), which an outgoing connection may hold with nothing listening: choose a port outside it, or reserve it in net.ipv4.ip_local_reserved_ports", port, lo, hi)
}

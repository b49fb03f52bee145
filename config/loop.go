package config

import (
	"fmt"
	"net"
	"strings"
)

// mllpLoops finds MLLP destinations that are one of this node's own MLLP
// inbounds (the same port, on a loopback host, or on the inbound's own
// host) and that routes lead back to: a message sent there is received
// again unchanged, matches the same routes, and is sent there again, for
// ever, each time stored anew. The file form of this loop (a destination
// writing into a polled directory) is refused in Check. A destination that
// reaches this node through another address (a VIP, its host name) is not
// seen. It returns one error per such destination, keyed as Check's.
func mllpLoops(c *Config) map[string]string {
	// target[o]: the inbound that outbound o delivers to, if it is ours.
	target := map[string]string{}
	for _, o := range c.Outbound {
		if o.Type != OutboundMLLP {
			continue
		}
		oh, op, err := splitHostPort(o.Address, false)
		if err != nil {
			continue // refused already
		}
		for _, in := range c.Inbound {
			if in.Type != InboundMLLP {
				continue
			}
			ih, ip, err := splitHostPort(in.Listen, true)
			if err == nil && ip == op && (sameHost(oh, ih) || (IsLoopback(oh) && (everyInterface(ih) || IsLoopback(ih)))) {
				target[o.Name] = in.Name
			}
		}
	}
	routes := map[string][]string{} // inbound → the outbounds its routes name
	for _, r := range c.Route {
		routes[r.From] = append(routes[r.From], r.To...)
	}
	out := map[string]string{}
	for i, o := range c.Outbound {
		in, ok := target[o.Name]
		if !ok {
			continue
		}
		// Follow inbound → outbounds → the inbound each is, from o's.
		seen := map[string]bool{}
		next := []string{in}
		for len(next) > 0 && !seen[o.Name] {
			cur := next[0]
			next = next[1:]
			for _, to := range routes[cur] {
				if seen[to] {
					continue
				}
				seen[to] = true
				if t, ok := target[to]; ok {
					next = append(next, t)
				}
			}
		}
		if seen[o.Name] {
			out[fmt.Sprintf("outbound[%d].address", i)] = fmt.Sprintf("%q is this node's inbound %q, and routes lead from it back to this destination: each message sent there would be received again, routed here again and sent again, for ever, stored anew each time; point the destination at another system, or take the route out", o.Address, in)
		}
	}
	return out
}

// sameHost reports whether two hosts of addresses are the same one, as
// written or as IP addresses.
func sameHost(a, b string) bool {
	ia, ib := net.ParseIP(a), net.ParseIP(b)
	return a != "" && (strings.EqualFold(a, b) || (ia != nil && ia.Equal(ib)))
}

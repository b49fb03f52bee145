package lanes

import (
	"fmt"
	"sort"
	"strings"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
)

// Router decides, for a message from an inbound, which destinations get it
// and in which lane. It is built once per graph from [[route]] and is safe
// for concurrent use (it is read-only).
type Router struct {
	byInbound map[string][]route
}

type route struct {
	filters []filter
	to      []string
	laneKey *hl7.Path // nil: one lane per destination
	// key is lane_key as written ("" for none).
	key string
}

type filter struct {
	path  hl7.Path
	value string
}

// NewRouter compiles the routes of c. Field paths were checked at load, but
// are parsed again here so that a Router never holds an unchecked path.
func NewRouter(c *config.Config) (*Router, error) {
	r := &Router{byInbound: map[string][]route{}}
	for i, rc := range c.Route {
		rt := route{to: rc.To, key: rc.LaneKey}
		keys := make([]string, 0, len(rc.Filter))
		for k := range rc.Filter {
			keys = append(keys, k)
		}
		sort.Strings(keys) // deterministic evaluation order
		for _, k := range keys {
			p, err := hl7.ParsePath(k)
			if err != nil {
				return nil, fmt.Errorf("route[%d].filter: %w", i, err)
			}
			rt.filters = append(rt.filters, filter{path: p, value: rc.Filter[k]})
		}
		if rc.LaneKey != "" {
			p, err := hl7.ParsePath(rc.LaneKey)
			if err != nil {
				return nil, fmt.Errorf("route[%d].lane_key: %w", i, err)
			}
			rt.laneKey = &p
		}
		r.byInbound[rc.From] = append(r.byInbound[rc.From], rt)
	}
	return r, nil
}

// Route returns one delivery per destination of every route from inbound
// whose filters all match m. A destination named by several matching routes
// gets the message once, in the lane of the first of them (routes are
// evaluated in file order). No delivery means the message is unrouted.
func (r *Router) Route(inbound string, m *hl7.Message) []storage.Delivery {
	var out []storage.Delivery
	seen := map[string]bool{}
	for _, rt := range r.byInbound[inbound] {
		if !rt.matches(m) {
			continue
		}
		for _, dest := range rt.to {
			if seen[dest] {
				continue
			}
			seen[dest] = true
			out = append(out, storage.Delivery{Destination: dest, Lane: rt.lane(dest, m)})
		}
	}
	return out
}

// lane is the lane of m for destination dest by this route.
func (rt route) lane(dest string, m *hl7.Message) string {
	if rt.laneKey == nil {
		return dest
	}
	return LaneName(dest, laneKeyValue(m, *rt.laneKey))
}

// matches reports whether every filter of rt holds for m: the field's
// value, read as a lane_key reads it (laneKeyValue), equals the filter's.
// Compared as written, a sender with other separators, or one that escapes
// or pads a value, matched no route, its messages stored unrouted.
func (rt route) matches(m *hl7.Message) bool {
	for _, f := range rt.filters {
		if laneKeyValue(m, f.path) != f.value {
			return false
		}
	}
	return true
}

// laneKeyValue is the value at p in m as a lane key: what HL7 says it
// means, not how the sender wrote it, since two spellings of one MRN would
// split one patient over two lanes, with no order between them. Each
// component and subcomponent is decoded (the same MRN is escaped
// differently under other separators: A#1 becomes A\P\1 once MSH-2 adds
// the v2.7 truncation character) and loses its trailing blanks, and empty
// trailing components and subcomponents are dropped: HL7 v2.3 section 2.10
// permits padding to fixed lengths (ST is "left justified with trailing
// blanks optional") and makes |ABC^DEF^^| and |ABC^DEF| equivalent. The
// parts are joined with ^ and &, whatever the message's separators.
func laneKeyValue(m *hl7.Message, p hl7.Path) string {
	raw, sep := m.Get(p), m.Separators()
	if p.Segment == "MSH" && p.Field <= 2 {
		return raw // the delimiters themselves
	}
	leaf := func(v string) string { return strings.TrimRight(hl7.Unescape(v, sep), " ") }
	subs := func(v string) string {
		if p.Subcomponent > 0 || sep.Subcomponent == 0 {
			return leaf(v)
		}
		return joinTrimmed(sep.Split(v, sep.Subcomponent), "&", leaf)
	}
	if p.Component > 0 {
		return subs(raw)
	}
	return joinTrimmed(sep.Split(raw, sep.Component), "^", subs)
}

// joinTrimmed joins f of each part with sep, less the empty ones at the end.
func joinTrimmed(parts []string, sep string, f func(string) string) string {
	for i := range parts {
		parts[i] = f(parts[i])
	}
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return strings.Join(parts, sep)
}

// LaneName is the lane of destination dest for lane key value key:
// "dest/key", key as laneKeyValue reads it. A route without lane_key uses
// the bare destination name.
// (The ingest stores it as every dialect can: storage.NewMessage.Storable.)
func LaneName(dest, key string) string { return dest + "/" + key }

// ResendLane is the lane of a stored message of inbound, payload as
// stored, resent to dest (storage.QueueResendDeadParams.Lane): the one the
// ingest would queue it in now, by Route, as stored
// (storage.NewMessage.Storable). The ingest would not queue it for dest
// when no route from inbound whose filters match it names dest
// (storage.ResendNotRouted), nor when it does not parse
// (storage.ResendUnparsable).
func (r *Router) ResendLane(inbound, dest string, payload []byte) (string, storage.ResendSkip) {
	m, err := hl7.Parse(payload)
	if err != nil {
		return "", storage.ResendUnparsable
	}
	if lane, ok := r.LaneTo(inbound, m, dest); ok {
		return lane, storage.ResendQueued
	}
	return "", storage.ResendNotRouted
}

// LaneTo is the lane, as stored (storage.NewMessage.Storable), that the
// ingest would queue message m of inbound in for dest now, by Route; ok is
// false when no route from inbound whose filters match m names dest. A
// resend, of one message or of an outbound's dead rows, queues its new row
// there.
func (r *Router) LaneTo(inbound string, m *hl7.Message, dest string) (lane string, ok bool) {
	for _, d := range r.Route(inbound, m) {
		if d.Destination == dest {
			return storable(d.Lane), true
		}
	}
	return "", false
}

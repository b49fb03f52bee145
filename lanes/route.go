package lanes

import (
	"fmt"
	"sort"

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
		rt := route{to: rc.To}
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
			lane := dest
			if rt.laneKey != nil {
				// Decoded: the same MRN is escaped differently under other
				// separators (A#1 becomes A\P\1 once MSH-2 adds the v2.7
				// truncation character), and a raw key would split one
				// patient over two lanes, with no order between them.
				lane = LaneName(dest, hl7.Unescape(m.Get(*rt.laneKey), m.Separators()))
			}
			out = append(out, storage.Delivery{Destination: dest, Lane: lane})
		}
	}
	return out
}

func (rt route) matches(m *hl7.Message) bool {
	for _, f := range rt.filters {
		if m.Get(f.path) != f.value {
			return false
		}
	}
	return true
}

// LaneName is the lane of destination dest for lane key value key:
// "dest/key", key decoded (hl7.Unescape). A route without lane_key uses the
// bare destination name.
// (The ingest stores it as every dialect can: storage.NewMessage.Storable.)
func LaneName(dest, key string) string { return dest + "/" + key }

package listeners

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/messagefoundry/mf/lanes"
)

// Binds is what the MLLP listeners of one node say of their ports: which
// listener of the running graph cannot open its port, and since when. A
// primary whose port another process holds (or whose certificate cannot be
// read) takes no message on that inbound, and the VIP's check of that port
// fails; its log says so at every retry, and GET /ready (503) and the
// metric mf_listener_bound say so too, for monitoring that reads no logs
// (DESIGN §3). One Binds serves every graph of the node, across terms and
// reloads. The zero value is ready; it is safe for concurrent use.
type Binds struct {
	mu      sync.Mutex
	failing map[string]Unbound // by inbound name
}

// Unbound is an MLLP listener that is retrying to open its port.
type Unbound struct {
	Inbound string
	Listen  string
	// Since is when its first attempt in a row failed.
	Since time.Time
}

// Reason says it in a sentence, for GET /ready: no error text, which the
// log carries (/ready answers without a token).
func (u Unbound) Reason() string {
	return fmt.Sprintf("the MLLP listener of inbound %s cannot open %s (retrying since %s; the log says why)",
		u.Inbound, u.Listen, u.Since.UTC().Format(time.RFC3339))
}

// Unbound lists the listeners retrying to open their port, by inbound name.
func (b *Binds) Unbound() []Unbound {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Unbound, 0, len(b.failing))
	for _, u := range b.failing {
		out = append(out, u)
	}
	slices.SortFunc(out, func(x, y Unbound) int { return strings.Compare(x.Inbound, y.Inbound) })
	return out
}

// failed records that inbound could not open listen at now.
func (b *Binds) failed(inbound, listen string, now time.Time) {
	boundGauge(inbound).Set(0)
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failing == nil {
		b.failing = map[string]Unbound{}
	}
	if _, already := b.failing[inbound]; !already {
		b.failing[inbound] = Unbound{Inbound: inbound, Listen: listen, Since: now}
	}
}

// bound records that inbound holds its port.
func (b *Binds) bound(inbound string) {
	boundGauge(inbound).Set(1)
	b.forget(inbound)
}

// stopped records that inbound's listener stopped (the graph stopped): it
// holds no port, and is not failing either.
func (b *Binds) stopped(inbound string) {
	boundGauge(inbound).Set(0)
	b.forget(inbound)
}

func (b *Binds) forget(inbound string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.failing, inbound)
}

// boundGauge is mf_listener_bound{inbound}: 1 while the inbound's MLLP
// listener holds its port, 0 otherwise (on a standby, or while it cannot
// open it).
func boundGauge(inbound string) *metrics.Gauge {
	return metrics.GetOrCreateGauge(fmt.Sprintf(`mf_listener_bound{inbound=%s}`, lanes.Label(inbound)), nil)
}

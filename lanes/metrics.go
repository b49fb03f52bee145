package lanes

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/messagefoundry/mf/config"
)

// Label quotes s as a Prometheus label value: a backslash, a double quote
// and a line feed escaped, every other character as it is. Names are the
// operator's; Go's %q wrote a tab or a no-break space as \t or \u00a0,
// escapes the Prometheus text format does not have, and one such name
// failed every scrape.
func Label(s string) string { return `"` + labelEscaper.Replace(s) + `"` }

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// observeDelivery counts one delivery attempt's outcome and its duration.
// Labels are the destination (bounded by the config) and the result, never a
// lane key or anything of the message.
func observeDelivery(dest, result string, took time.Duration) {
	metrics.GetOrCreateCounter(fmt.Sprintf(`mf_deliveries_total{destination=%s,result=%s}`, Label(dest), Label(result))).Inc()
	metrics.GetOrCreatePrometheusHistogram(fmt.Sprintf(`mf_delivery_duration_seconds{destination=%s}`, Label(dest))).Update(took.Seconds())
}

// countRefusedAfter counts an error or a rejection (AE, AR, CE, CR) an MLLP
// destination answered to a message already counted delivered, sent with
// MSH-15 NE or ER without waiting for its ACK. Not a result of
// mf_deliveries_total, which counts each attempt once, by its outcome.
func countRefusedAfter(dest string) {
	metrics.GetOrCreateCounter(fmt.Sprintf(`mf_deliveries_refused_after_total{destination=%s}`, Label(dest))).Inc()
}

// activeLanes is the number of lane actors the manager has running.
var activeLanes atomic.Int64

func setActiveLanes(n int) { activeLanes.Store(int64(n)) }

// Delivery results, a closed set (metric label values).
var deliveryResults = []string{"delivered", "retry", "dead", "blocked"}

// RegisterMetrics creates the delivery series at zero, so that a scrape
// shows them before any traffic.
func RegisterMetrics(outbounds []config.Outbound) {
	for _, o := range outbounds {
		for _, r := range deliveryResults {
			metrics.GetOrCreateCounter(fmt.Sprintf(`mf_deliveries_total{destination=%s,result=%s}`, Label(o.Name), Label(r)))
		}
		metrics.GetOrCreatePrometheusHistogram(fmt.Sprintf(`mf_delivery_duration_seconds{destination=%s}`, Label(o.Name)))
		if o.Type == config.OutboundMLLP {
			metrics.GetOrCreateCounter(fmt.Sprintf(`mf_deliveries_refused_after_total{destination=%s}`, Label(o.Name)))
		}
	}
	metrics.GetOrCreateGauge("mf_lanes_active", func() float64 { return float64(activeLanes.Load()) })
}

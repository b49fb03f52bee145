package lanes

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/messagefoundry/mf/config"
)

// observeDelivery counts one delivery attempt's outcome and its duration.
// Labels are the destination (bounded by the config) and the result, never a
// lane key or anything of the message.
func observeDelivery(dest, result string, took time.Duration) {
	metrics.GetOrCreateCounter(fmt.Sprintf(`mf_deliveries_total{destination=%q,result=%q}`, dest, result)).Inc()
	metrics.GetOrCreatePrometheusHistogram(fmt.Sprintf(`mf_delivery_duration_seconds{destination=%q}`, dest)).Update(took.Seconds())
}

// StoreError counts a failed store call by operation.
func StoreError(op string) {
	metrics.GetOrCreateCounter(fmt.Sprintf(`mf_store_errors_total{op=%q}`, op)).Inc()
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
			metrics.GetOrCreateCounter(fmt.Sprintf(`mf_deliveries_total{destination=%q,result=%q}`, o.Name, r))
		}
		metrics.GetOrCreatePrometheusHistogram(fmt.Sprintf(`mf_delivery_duration_seconds{destination=%q}`, o.Name))
	}
	metrics.GetOrCreateCounter(`mf_store_errors_total{op="message_ingest"}`)
	metrics.GetOrCreateGauge("mf_lanes_active", func() float64 { return float64(activeLanes.Load()) })
}

package lanes

import (
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"
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

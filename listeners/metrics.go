package listeners

import (
	"fmt"
	"slices"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/lanes"
)

var ingestBatchSize = metrics.NewPrometheusHistogramExt("mf_ingest_batch_size",
	[]float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512})

func observeBatch(n int) { ingestBatchSize.Update(float64(n)) }

func countReceived(inbound string) {
	metrics.GetOrCreateCounter(fmt.Sprintf(`mf_messages_received_total{inbound=%s}`, lanes.Label(inbound))).Inc()
}

// Rejection reasons, a closed set (metric label values).
const (
	reasonParse     = "parse"
	reasonOversize  = "oversize"
	reasonNotFramed = "not_framed"
	reasonStore     = "store"
	reasonRefused   = "refused"
	// reasonIncomplete: a frame begun and not ended within read_timeout
	// (a stalled sender, a slow-loris), closed without an answer.
	reasonIncomplete = "incomplete"
	// reasonProcessingID: a processing ID (MSH-11) other than the
	// inbound's processing_id (a test system's message in production).
	reasonProcessingID = "processing_id"
	// reasonNoControlID: no control ID (MSH-10 empty, only blanks or
	// missing), which HL7 requires and an ACK names the message by.
	reasonNoControlID = "no_control_id"
)

func countRejected(inbound, reason string) {
	metrics.GetOrCreateCounter(fmt.Sprintf(`mf_messages_rejected_total{inbound=%s,reason=%s}`, lanes.Label(inbound), lanes.Label(reason))).Inc()
}

// countUnrouted counts a message stored that no route took (acknowledged AA):
// a feed whose filters drop a message type by design does so for each, so
// this, not a log line per message, is what an alert watches.
func countUnrouted(inbound string) {
	metrics.GetOrCreateCounter(fmt.Sprintf(`mf_messages_unrouted_total{inbound=%s}`, lanes.Label(inbound))).Inc()
}

func observeAck(inbound string, since time.Time) {
	metrics.GetOrCreatePrometheusHistogram(fmt.Sprintf(`mf_ack_duration_seconds{inbound=%s}`, lanes.Label(inbound))).UpdateDuration(since)
}

// TLS handshake failure reasons, the reason label of
// mf_tls_handshakes_failed_total. A TCP check's close before a handshake is
// none: the VIP's checks would drown a partner's failures.
const (
	// tlsClientNotListed: a client certificate the CA signed, for none of
	// the inbound's tls_client_names.
	tlsClientNotListed = "client_not_listed"
	// tlsClientRevoked: a client certificate (or a CA of its chain) that
	// its issuer's CRL, in client_crl, revokes.
	tlsClientRevoked = "client_revoked"
	// tlsFailed: any other (no client certificate, one the CA did not
	// sign or out of its dates, no common version or cipher, the
	// listener's own certificate refused).
	tlsFailed = "failed"
)

// countHandshakeFailed counts a TLS handshake of an inbound that failed: a
// partner refused for good retries every few seconds and is logged once a
// minute, but a dashboard or an alert needs the count.
func countHandshakeFailed(inbound, reason string) {
	metrics.GetOrCreateCounter(fmt.Sprintf(`mf_tls_handshakes_failed_total{inbound=%s,reason=%s}`, lanes.Label(inbound), lanes.Label(reason))).Inc()
}

func countRefusedConn(inbound string) {
	metrics.GetOrCreateCounter(fmt.Sprintf(`mf_connections_refused_total{inbound=%s}`, lanes.Label(inbound))).Inc()
}

// RegisterMetrics creates the inbound series at zero, so that a scrape shows
// them before any traffic.
func RegisterMetrics(inbounds []config.Inbound) {
	for _, in := range inbounds {
		metrics.GetOrCreateCounter(fmt.Sprintf(`mf_messages_received_total{inbound=%s}`, lanes.Label(in.Name)))
		metrics.GetOrCreateCounter(fmt.Sprintf(`mf_messages_unrouted_total{inbound=%s}`, lanes.Label(in.Name)))
		for _, reason := range []string{reasonParse, reasonOversize, reasonNotFramed, reasonStore, reasonRefused, reasonIncomplete, reasonProcessingID, reasonNoControlID} {
			metrics.GetOrCreateCounter(fmt.Sprintf(`mf_messages_rejected_total{inbound=%s,reason=%s}`, lanes.Label(in.Name), lanes.Label(reason)))
		}
		metrics.GetOrCreatePrometheusHistogram(fmt.Sprintf(`mf_ack_duration_seconds{inbound=%s}`, lanes.Label(in.Name)))
		if in.Type == config.InboundMLLP { // only a listener has connections to refuse, and a port
			boundGauge(in.Name)
			metrics.GetOrCreateCounter(fmt.Sprintf(`mf_connections_refused_total{inbound=%s}`, lanes.Label(in.Name)))
			if in.TLSCert != "" {
				for _, reason := range []string{tlsClientNotListed, tlsClientRevoked, tlsFailed} {
					metrics.GetOrCreateCounter(fmt.Sprintf(`mf_tls_handshakes_failed_total{inbound=%s,reason=%s}`, lanes.Label(in.Name), lanes.Label(reason)))
				}
			}
		}
	}
}

// RetireMetrics drops the mf_listener_bound series of the MLLP inbounds of
// old that are not MLLP inbounds of cur (a reload took them out, renamed
// them or made them file pollers): left at 0, each said on the primary,
// until a restart, that a listener could not open its port. Call it once
// their listeners have stopped: a listener's stop sets its series again.
// Their counters stay, at the counts they reached.
func RetireMetrics(old, cur []config.Inbound) {
	for _, in := range old {
		if in.Type != config.InboundMLLP || slices.ContainsFunc(cur, func(c config.Inbound) bool {
			return c.Name == in.Name && c.Type == config.InboundMLLP
		}) {
			continue
		}
		metrics.UnregisterMetric(fmt.Sprintf(`mf_listener_bound{inbound=%s}`, lanes.Label(in.Name)))
	}
}

package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/listeners"
	"github.com/messagefoundry/mf/storage"
)

// queueSnapshot is what the queue gauges report: read from the store at each
// scrape (any node can, the store is shared), so a standby reports the same
// depths as the primary.
type queueSnapshot struct {
	depth map[string]float64 // pending + in flight, by destination
	// oldest is the age in seconds of the oldest row pending or in
	// flight, by destination (database clock, as read at the scrape).
	oldest  map[string]float64
	dead    map[string]float64 // rows set aside as dead, by destination
	blocked float64            // lanes whose head is held for an operator
	// held has the outbounds an operator holds (Store.OutboundHolds).
	held map[string]bool
}

// queueStatsMaxAge bounds how old the queue counts a scrape shows may be:
// scrapes closer together share one read of the database (statsCache),
// each a count of every unfinished row (0.3 to 0.55 s on PostgreSQL and
// 1.9 s on SQLite with 500,000 of them, measured while they drained; a
// standby and each of a pair of Prometheus servers scrape too).
const queueStatsMaxAge = 5 * time.Second

// statsCache keeps the queue counts of the last read for GET /metrics, and
// lets the scrapes that come while a read is under way wait for it rather
// than start their own.
type statsCache struct {
	mu sync.Mutex
	// stats were read by the read that began at at (zero: none kept).
	stats []storage.QueueStat
	at    time.Time
	// reading is the read under way, if any.
	reading *statsFlight
}

// statsFlight is one read of the queue counts: done is closed once stats,
// at and err are set.
type statsFlight struct {
	done  chan struct{}
	stats []storage.QueueStat
	at    time.Time
	err   error
}

// get returns queue counts read at most maxAge ago, and how old they are
// if an earlier scrape read them (0 if they were read for this one),
// reading them with read (one read for every scrape that asks meanwhile)
// when there are none that young. A waiting scrape gives up when ctx ends.
func (c *statsCache) get(ctx context.Context, maxAge time.Duration, read func() ([]storage.QueueStat, error)) ([]storage.QueueStat, time.Duration, error) {
	c.mu.Lock()
	if age := time.Since(c.at); !c.at.IsZero() && age < maxAge {
		defer c.mu.Unlock()
		return c.stats, max(age, 0), nil
	}
	f := c.reading
	if f == nil {
		f = &statsFlight{done: make(chan struct{}), at: time.Now()}
		c.reading = f
		c.mu.Unlock()
		f.stats, f.err = read()
		c.mu.Lock()
		if c.reading == f { // not dropped meanwhile
			c.reading = nil
			if f.err == nil {
				c.stats, c.at = f.stats, f.at
			}
		}
		c.mu.Unlock()
		close(f.done)
		return f.stats, 0, f.err
	}
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.stats, 0, f.err
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

// drop forgets the counts kept, and the read under way: an operator's
// write through this node changed them, and the next scrape reads afresh.
func (c *statsCache) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats, c.at, c.reading = nil, time.Time{}, nil
}

var (
	snapshot     atomic.Pointer[queueSnapshot]
	registerOnce sync.Mutex
)

func currentSnapshot() *queueSnapshot {
	if s := snapshot.Load(); s != nil {
		return s
	}
	return &queueSnapshot{}
}

// registerMetrics creates every series of DESIGN §9 that the config implies,
// at zero, so that a scrape shows them all before any traffic.
func registerMetrics(cfg *config.Config) {
	registerOnce.Lock()
	defer registerOnce.Unlock()
	// # TYPE lines: without them a parser sees a histogram's _bucket,
	// _sum and _count as three untyped series.
	metrics.ExposeMetadata(true)
	listeners.RegisterMetrics(cfg.Inbound)
	lanes.RegisterMetrics(cfg.Outbound)
	actors.RegisterMetrics()
	storage.RegisterMetrics()
	for _, o := range cfg.Outbound {
		queueDepthGauge(o.Name)
	}
	metrics.GetOrCreateGauge("mf_lanes_blocked", func() float64 { return currentSnapshot().blocked })
}

// queueDepthGauge makes sure dest has its mf_queue_depth,
// mf_queue_oldest_age_seconds, mf_queue_dead and mf_outbound_held series. The start-up config's destinations
// get theirs at once, at zero; any other destination with queue rows (one a
// config reload added, or one a reload removed that still has a backlog)
// gets its own at the first scrape that finds them.
func queueDepthGauge(dest string) {
	metrics.GetOrCreateGauge(fmt.Sprintf(`mf_outbound_held{destination=%s}`, lanes.Label(dest)), func() float64 {
		if currentSnapshot().held[dest] {
			return 1
		}
		return 0
	})
	metrics.GetOrCreateGauge(fmt.Sprintf(`mf_queue_depth{destination=%s}`, lanes.Label(dest)), func() float64 {
		return currentSnapshot().depth[dest]
	})
	metrics.GetOrCreateGauge(fmt.Sprintf(`mf_queue_oldest_age_seconds{destination=%s}`, lanes.Label(dest)), func() float64 {
		return currentSnapshot().oldest[dest]
	})
	metrics.GetOrCreateGauge(fmt.Sprintf(`mf_queue_dead{destination=%s}`, lanes.Label(dest)), func() float64 {
		return currentSnapshot().dead[dest]
	})
}

// help is the HELP text of every series the engine exports.
var help = map[string]string{
	"mf_messages_received_total":           "Messages read from an inbound (MLLP frames, file messages).",
	"mf_messages_rejected_total":           "Inbound messages refused, by reason: parse (not HL7), oversize, not_framed, refused (a value the database refused: kept as rejected, AR), store (not stored: AE), incomplete (a frame not ended within read_timeout: closed, no answer), processing_id (MSH-11 not the inbound's processing_id: kept as rejected, AR), no_control_id (MSH-10 empty, only blanks or missing: kept as rejected, AR).",
	"mf_messages_unrouted_total":           "Messages stored that no route took (status unrouted, acknowledged AA).",
	"mf_ack_duration_seconds":              "Time from a message's arrival to its acknowledgement, the commit included.",
	"mf_connections_refused_total":         "MLLP connections closed at once because the listener was at max_connections, or the process out of file descriptors.",
	"mf_listener_bound":                    "1 while the inbound's MLLP listener holds its port; 0 on a standby and while it cannot open it (the listener retries; GET /ready is 503).",
	"mf_deliveries_total":                  "Delivery attempts by result: delivered, retry, dead, blocked.",
	"mf_delivery_duration_seconds":         "Time of one delivery attempt to a destination.",
	"mf_deliveries_refused_after_total":    "Messages sent with MSH-15 NE or ER, counted delivered without waiting for an ACK, that the MLLP destination answered afterwards with an error or a rejection (AE, AR, CE, CR).",
	"mf_queue_depth":                       "Queue rows pending or in flight, by destination.",
	"mf_queue_oldest_age_seconds":          "Age of the destination's oldest queue row pending or in flight, on the database's clock (0 with none): how long its longest-waiting message has waited.",
	"mf_queue_dead":                        "Queue rows set aside as dead (on_exhausted = dead, or an operator's skip), by destination, as long as the store keeps them (until the purge; a resend leaves them).",
	"mf_lanes_blocked":                     "Lanes whose head is held for an operator (on_exhausted = block).",
	"mf_outbound_held":                     "1 while an operator holds the outbound (POST /outbounds/{name}/hold): its lanes send nothing, its messages are queued; else 0.",
	"mf_lanes_active":                      "Lanes with a delivering actor on this node now (each stops when its lane runs dry).",
	"mf_is_leader":                         "1 while this node is the leader (runs the graph), else 0.",
	"mf_config_drift":                      "1 while this node's graph config ([[inbound]], [[outbound]], [[route]] and the settings the graph reads) differs from the primary's, else 0 (the primary's is 0; its WARN names the node).",
	"mf_leader_term":                       "The leader term this node works under (0 when not leading, or single-node).",
	"mf_lease_renew_duration_seconds":      "Time of one leader lease renewal.",
	"mf_leadership_changes_total":          "Leadership changes of this node by reason: elected, renew-lost, fenced, single-node, lock-lost.",
	"mf_tls_cert_expiry_timestamp_seconds": "When the certificate (tls_cert) of a TLS endpoint expires, Unix seconds, by kind (api, inbound, outbound) and name, as read at start and at each reload (the API's at start only), and when a listener, a destination or the API loads its renewed certificate from disk: alert well before it, since peers then refuse every handshake.",
	"mf_ingest_batch_size":                 "Messages per ingest transaction (group commit).",
	"mf_store_errors_total":                "Failed store calls by operation (not those refused by the fence or cancelled by a leadership change or stop).",

	// An MLLP inbound's TLS handshakes and its client_crl.
	"mf_tls_handshakes_failed_total":           "TLS handshakes of an MLLP inbound that failed, by reason: client_not_listed (a certificate for none of tls_client_names), client_revoked (a certificate a CRL of client_crl revokes), failed (any other).",
	"mf_tls_crl_next_update_timestamp_seconds": "The earliest next update of the CRLs of an MLLP inbound's client_crl, Unix seconds, by kind (inbound) and name, set by its listener when it opens its port and when the files change on disk: once past, the list is still enforced but certificates its CA revoked since are admitted; fetch the CA's current CRL.",
}

// runtime holds the Go and process collectors. VictoriaMetrics has its own,
// but their names and types fail promtool's lint (go_cgo_calls_count typed
// counter, process_io_*_total typed gauge); client_golang's are Prometheus's
// conventions.
var runtime = func() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}()

// metrics serves the Prometheus text format: the engine's series, Go
// runtime and process metrics.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	snap := &queueSnapshot{depth: map[string]float64{}, oldest: map[string]float64{}, dead: map[string]float64{}}
	// Bounded, so that a scrape while the database does not answer still
	// gets every other series in time. The read is the scrapes' that wait
	// for it, not only this one's: a client gone does not end it.
	ctx, cancel := storeCtx(r, s.limits.storeRead)
	defer cancel()
	stats, aged, err := s.stats.get(ctx, s.limits.statsMaxAge, func() ([]storage.QueueStat, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.limits.storeRead)
		defer cancel()
		return s.o.Store.QueueStats(rctx)
	})
	// The holds each scrape: one row per held outbound, and a hold shows
	// at once rather than up to statsMaxAge later.
	var holds []storage.OutboundHeld
	if err == nil {
		holds, err = s.o.Store.OutboundHolds(ctx)
		snap.held = heldOutbounds(holds)
	}
	if err == nil {
		// Counts an earlier scrape read: their oldest rows have aged since
		// (or gone, and the age is over by at most queueStatsMaxAge).
		for _, st := range stats {
			if st.Status == storage.QueuePending || st.Status == storage.QueueInflight {
				snap.depth[st.Destination] += float64(st.Count)
				oldest := st.OldestAge
				if oldest > 0 {
					oldest += aged
				}
				snap.oldest[st.Destination] = max(snap.oldest[st.Destination], oldest.Seconds())
			}
			if st.Status == storage.QueueDead {
				snap.dead[st.Destination] += float64(st.Count)
			}
			// A held row is its lane's head: one per blocked lane. Counted
			// here rather than from QueueLanes, a second read of every
			// unfinished row per scrape.
			snap.blocked += float64(st.Held)
		}
	}
	if err != nil {
		storage.CountError(ctx, "metrics_queue", err)
		if log, n := s.unscraped.Failed(time.Now()); log {
			s.o.Log.Warn().Err(err).Int("failures", n).
				Msg("metrics: reading the queue failed; queue gauges keep their last values (logged once a minute while it lasts)")
		}
	} else {
		if n := s.unscraped.Over(); n > 0 {
			s.o.Log.Info().Int("failures", n).Msg("metrics: reading the queue works again")
		}
		snapshot.Store(snap)
		for _, st := range stats {
			queueDepthGauge(st.Destination)
		}
		for _, h := range holds {
			queueDepthGauge(h.Outbound)
		}
	}
	var engine bytes.Buffer
	metrics.WritePrometheus(&engine, false)
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	// VictoriaMetrics writes "# HELP name" with no text: fill it in.
	for _, line := range strings.SplitAfter(engine.String(), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "# HELP "); ok && !strings.Contains(name, " ") {
			line = "# HELP " + name + " " + help[name] + "\n"
		}
		io.WriteString(w, line)
	}
	families, err := runtime.Gather()
	if err != nil {
		s.o.Log.Warn().Err(err).Msg("metrics: gathering Go and process metrics failed")
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		_ = enc.Encode(f)
	}
}

package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/VictoriaMetrics/metrics"
)

// CountError counts a store call by operation that failed with err under
// ctx in mf_store_errors_total{op}, unless the fence refused it or ctx was
// cancelled (the term ended, the node or the request stops): those are the
// leadership changes and stops that mf_leadership_changes_total tells, not
// a database in trouble, which is what this counter, and an alert on it,
// are for. A call that ran out of time (deadline) is counted. op is one of
// ErrorOps.
func CountError(ctx context.Context, op string, err error) {
	if errors.Is(err, ErrFenced) || errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	metrics.GetOrCreateCounter(errorSeries(op)).Inc()
}

// ErrorOps are the ops CountError is called with, in every package: each
// gets its mf_store_errors_total series at zero (RegisterMetrics), since a
// series born at 1 hides its first failure from increase() and rate(). A
// new op belongs here.
var ErrorOps = []string{
	"message_ingest", "metrics_queue", // listeners, api
	"claim", "advance", "complete", "retry", "hold", "dead", "give back", "release own", "queue_lanes", "outbound_holds", // lanes
	"queue_reclaim_expired", "message_purge", "queue_recover_foreign", "queue_relane", // actors
	"lease_elect", "lease_renew", "node_heartbeat", "config_version_read", // leadership
}

// RegisterMetrics creates every op's mf_store_errors_total series at zero.
func RegisterMetrics() {
	for _, op := range ErrorOps {
		metrics.GetOrCreateCounter(errorSeries(op))
	}
}

// errorSeries names op's series. The ops are plain ASCII words of ours
// (ErrorOps), so %q quotes them as the Prometheus text format does.
func errorSeries(op string) string { return fmt.Sprintf(`mf_store_errors_total{op=%q}`, op) }

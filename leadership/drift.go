package leadership

import (
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
)

// driftGrace is how long two nodes on different config versions may run
// different graph configs before it is reported: that is a reload on its
// way (each node reloads at its own next heartbeat, the primary only once
// its graph has drained), not a drift. One still there after it is a node
// whose reload failed: it runs the old config. Nodes on one version that
// differ are reported at once.
const driftGrace = time.Minute

// configDrift is this node's mf_config_drift: its graph config differs from
// the primary's. Process-wide, as the gauge is; a single node (no elector)
// reports 0.
var configDrift atomic.Bool

// ConfigDrift reports this node's mf_config_drift: whether its graph config
// differs from the primary's, as its last heartbeat found (false on the
// primary, on a single node, and for a minute after a reload on its way).
func ConfigDrift() bool { return configDrift.Load() }

// configDiffers is set while this node's graph config differs from the
// primary's, as its last heartbeat found, without driftGrace: a reload on
// its way, or one that failed. Process-wide, as configDrift.
var configDiffers atomic.Bool

// ConfigDiffers reports whether this standby's graph config differs from
// the primary's, as its last heartbeat found, from the first beat that saw
// it (ConfigDrift waits a minute for a reload on its way). What follows the
// node's own routes, an operator's resend, is refused on it meanwhile: in
// ConfigDrift's minute, a standby whose reload of a changed lane_key had
// failed queued resends in lanes of the old key.
func ConfigDiffers() bool { return configDiffers.Load() }

var _ = metrics.NewGauge("mf_config_drift", func() float64 {
	if configDrift.Load() {
		return 1
	}
	return 0
})

// driftWatch is the elector's state for the drift check.
type driftWatch struct {
	// self is since when this node's graph config has differed from the
	// primary's (zero: it does not); a standby's.
	self time.Time
	// since and warned are the primary's: since when each live node's has
	// differed from its own, and that node's WARN, once a minute.
	since  map[string]time.Time
	warned map[string]*storage.Outage
}

// differs says whether a node's graph config (fingerprint fp, loaded at
// config version v) is to be reported as differing from the primary's (pfp,
// pv), and keeps in since when the difference was first seen. Fingerprints
// of another format (a node of an older or newer mf, mid rolling upgrade)
// are not compared.
func differs(since *time.Time, now time.Time, fp string, v int64, pfp string, pv int64) bool {
	if fp == pfp || !config.SameFormat(fp, pfp) {
		*since = time.Time{}
		return false
	}
	if since.IsZero() {
		*since = now
	}
	return v == pv || now.Sub(*since) >= driftGrace
}

// checkDrift compares graph configs in the membership l, read at now. Every
// node of a cluster must run the same graph, since any may become the
// primary: one started with a file whose routes or connections differ went
// unnoticed until a failover made it primary, and it then routed messages
// differently or dropped a destination. The primary logs each live node
// whose config differs, once a minute while it lasts; every node sets its
// mf_config_drift from the primary's row (the primary's is 0). Without a
// live primary to compare with, the gauge keeps its value.
func (e *Elector) checkDrift(l storage.NodeList, now time.Time) {
	timeout := e.cfg.NodeTimeout()
	if e.leader {
		e.drift.self = time.Time{}
		configDrift.Store(false)
		configDiffers.Store(false)
		e.checkNodesDrift(l, now, timeout)
		return
	}
	e.forgetNodesDrift(nil)
	leader := LeaderOf(l, timeout)
	if leader == "" || leader == e.nodeID { // none, or this node's own flag not cleared yet
		return
	}
	for _, n := range l.Nodes {
		if n.NodeID == leader {
			configDrift.Store(differs(&e.drift.self, now, e.fingerprint, e.configLoaded, n.ConfigFingerprint, n.ConfigVersion))
			configDiffers.Store(!e.drift.self.IsZero()) // differs keeps since while they differ
			return
		}
	}
}

// checkNodesDrift is the primary's side of checkDrift: every other live
// node against this one.
func (e *Elector) checkNodesDrift(l storage.NodeList, now time.Time, timeout time.Duration) {
	if e.drift.since == nil {
		e.drift.since, e.drift.warned = map[string]time.Time{}, map[string]*storage.Outage{}
	}
	live := map[string]bool{}
	for _, n := range l.Nodes {
		if n.NodeID == e.nodeID || n.Status != storage.NodeActive || l.DBNow.Sub(n.LastSeen) > timeout {
			continue
		}
		live[n.NodeID] = true
		since := e.drift.since[n.NodeID]
		drifted := differs(&since, now, n.ConfigFingerprint, n.ConfigVersion, e.fingerprint, e.configLoaded)
		if since.IsZero() {
			delete(e.drift.since, n.NodeID)
		} else {
			e.drift.since[n.NodeID] = since
		}
		o := e.drift.warned[n.NodeID]
		if !drifted {
			if o != nil && o.Over() > 0 {
				e.log.Info().Str("other_node", n.NodeID).Str("other_host", n.Host).
					Msg("this node runs the primary's graph config again")
			}
			delete(e.drift.warned, n.NodeID)
			continue
		}
		if o == nil {
			o = &storage.Outage{}
			e.drift.warned[n.NodeID] = o
		}
		if log, beats := o.Failed(now); log {
			e.log.Warn().Str("other_node", n.NodeID).Str("other_host", n.Host).
				Int64("other_config_version", n.ConfigVersion).Int64("config_version", e.configLoaded).
				Str("other_config_fingerprint", n.ConfigFingerprint).Str("config_fingerprint", e.fingerprint).
				Int("beats", beats).
				Msg("another node runs a graph config ([[inbound]], [[outbound]], [[route]], the row lease, retention or sweep) that differs from this primary's: should it become primary, it would route and deliver messages differently; deploy the same config file to every node, then run mf reload (logged once a minute while it lasts; its mf_config_drift is 1)")
		}
	}
	e.forgetNodesDrift(live)
}

// forgetNodesDrift drops the primary's state of the nodes not in keep (all
// of them for nil): nodes gone, or this node no longer primary.
func (e *Elector) forgetNodesDrift(keep map[string]bool) {
	for id := range e.drift.since {
		if !keep[id] {
			delete(e.drift.since, id)
		}
	}
	for id := range e.drift.warned {
		if !keep[id] {
			delete(e.drift.warned, id)
		}
	}
}

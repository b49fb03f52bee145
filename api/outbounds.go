package api

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
)

// OutboundHold is the answer of POST /outbounds/{name}/hold and
// /release: whether the outbound is held now, and since when (epoch
// seconds, the database clock; null when it is not held).
type OutboundHold struct {
	Outbound string   `json:"outbound"`
	Held     bool     `json:"held"`
	Since    *float64 `json:"since"`
}

// outboundHold is POST /outbounds/{name}/hold: the outbound's lanes claim
// and send nothing until it is released (the primary notices within about
// lanes.RescanInterval; a send in flight finishes), while its messages are
// still stored, acknowledged and queued. The hold is a row of the shared
// database: made from any node, standbys too, it holds across restarts
// and failovers. Holding a held outbound changes nothing (its since stays).
func (s *Server) outboundHold(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !configuredOutbound(s.inForce(), name) {
		writeError(w, http.StatusNotFound, noOutbound(name))
		return
	}
	ctx, cancel := storeCtx(r, s.limits.storeWrite)
	defer cancel()
	held, err := s.o.Store.OutboundHold(ctx, storage.OutboundHoldParams{Outbound: name})
	if err != nil {
		s.storeWriteFailed(w, "outbound hold", err)
		return
	}
	s.o.Log.Info().Str("destination", name).Str("token", principalOf(r).name).Str("remote", r.RemoteAddr).
		Msg("operator held an outbound: its lanes send nothing until it is released (POST /outbounds/{name}/release)")
	writeJSON(w, http.StatusOK, OutboundHold{Outbound: name, Held: true, Since: epoch(held.Since)})
}

// outboundRelease is POST /outbounds/{name}/release: the outbound's lanes
// resume from their heads, in order. Releasing an outbound not held changes
// nothing. An outbound no longer in the config may still be released if
// it is held (a reload took it out while it was), so that its row goes.
func (s *Server) outboundRelease(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := storeCtx(r, s.limits.storeWrite)
	defer cancel()
	released, err := s.o.Store.OutboundRelease(ctx, storage.OutboundReleaseParams{Outbound: name})
	if err != nil {
		s.storeWriteFailed(w, "outbound release", err)
		return
	}
	if !released && !configuredOutbound(s.inForce(), name) {
		writeError(w, http.StatusNotFound, noOutbound(name))
		return
	}
	if released {
		s.o.Log.Info().Str("destination", name).Str("token", principalOf(r).name).Str("remote", r.RemoteAddr).
			Msg("operator released an outbound: its lanes resume from their heads")
	}
	writeJSON(w, http.StatusOK, OutboundHold{Outbound: name, Held: false})
}

// configuredOutbound reports whether cfg has an [[outbound]] named name.
func configuredOutbound(cfg *config.Config, name string) bool {
	return slices.ContainsFunc(cfg.Outbound, func(o config.Outbound) bool { return o.Name == name })
}

// noOutbound is the error of the 404 for an outbound name this node's
// config does not have.
func noOutbound(name string) string {
	return "no outbound " + strconv.Quote(name) + " in this node's config ([[outbound]] name)"
}

// heldOutbounds is the set of the names in holds.
func heldOutbounds(holds []storage.OutboundHeld) map[string]bool {
	out := make(map[string]bool, len(holds))
	for _, h := range holds {
		out[h.Outbound] = true
	}
	return out
}

package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/lanes"
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
// and send nothing until it is released, while its messages are still
// stored, acknowledged and queued. From the answer on no lane claims a row
// of it: the claim statement refuses the rows of a held outbound, whichever
// node's API held it. The primary's own lanes have been told before the
// answer (Options.OutboundHeld), so that rows they claimed ahead go back
// unsent and only a send in flight finishes; a hold made on a standby
// reaches them at the primary's next rescan (lanes.RescanInterval). The
// hold is a row of the shared database: made from any node, standbys too,
// it holds across restarts and failovers. Holding a held outbound changes
// nothing (its since stays).
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
	s.tellLanes(ctx, name, true)
	writeJSON(w, http.StatusOK, OutboundHold{Outbound: name, Held: true, Since: epoch(held.Since)})
}

// outboundRelease is POST /outbounds/{name}/release: the outbound's lanes
// resume from their heads, in order: on the primary, started before the
// answer (Options.OutboundHeld); made on a standby, at the primary's next
// rescan (lanes.RescanInterval). Releasing an outbound not held changes
// nothing. An outbound no longer in the config may still be released if
// it is held (a reload took it out while it was), so that its row goes.
func (s *Server) outboundRelease(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !validText(name) { // no outbound has such a name, held or not: PostgreSQL refuses it (503)
		writeError(w, http.StatusNotFound, noOutbound(name))
		return
	}
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
		s.tellLanes(ctx, name, false)
	}
	writeJSON(w, http.StatusOK, OutboundHold{Outbound: name, Held: false})
}

// tellLanes tells this node's lane manager of a hold or release of
// outbound the store has just made (Options.OutboundHeld). A failure is
// logged, not answered: the hold is stored, every claim refuses the
// outbound's rows, and the manager's next rescan reads it.
func (s *Server) tellLanes(ctx context.Context, outbound string, held bool) {
	if s.o.OutboundHeld == nil {
		return
	}
	if err := s.o.OutboundHeld(ctx, outbound, held); err != nil {
		s.o.Log.Warn().Err(err).Str("destination", outbound).Bool("held", held).
			Msg(fmt.Sprintf("the lane manager was not told of the outbound's hold or release at once (it may be stopping); it reads it from the store within %v", lanes.RescanInterval))
	}
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

// ResentDead is the answer of POST /outbounds/{name}/resend-dead: how many
// dead rows were queued again, and the first and last new queue ids (null
// when none was); and how many were left dead, not resent, because the
// ingest would not queue their messages for the outbound now: the routes
// in force no longer send them there (NotRouted), or their stored bytes do
// not parse as HL7 v2 (Unparsable).
type ResentDead struct {
	Outbound   string `json:"outbound"`
	Resent     int    `json:"resent"`
	FirstID    *int64 `json:"first_id"`
	LastID     *int64 `json:"last_id"`
	NotRouted  int    `json:"not_routed"`
	Unparsable int    `json:"unparsable"`
}

// resendDeadParams are the parameters POST /outbounds/{name}/resend-dead
// takes, each at most once; MaxResendDeadLimit bounds its limit.
var resendDeadParams = []string{"since", "until", "limit"}

// MaxResendDeadLimit is the largest limit POST /outbounds/{name}/resend-dead
// takes.
const MaxResendDeadLimit = 1_000_000

// outboundResendDead is POST
// /outbounds/{name}/resend-dead[?since=&until=&limit=]: the messages of the
// outbound's dead rows (on_exhausted = "dead", or an operator's skip) are
// queued again, each a new pending row at the tail of the lane the routes
// in force give it now, computed from the stored message as the ingest
// does (as POST /messages/{id}/resend), in the dead rows' order, and each
// dead row is marked so that another call does not resend it again
// (storage.Store.QueueResendDead). The dead row's own lane is one of the
// lane_key it was queued under: after a reload that changed it, a new row
// there was delivered with no order against the messages queued since. A
// row whose message the ingest would not queue for the outbound now (no
// route sends it there, or it does not parse) is left dead, and counted.
// since and until bound when the rows were set aside, limit how many are
// resent. From any node, in transactions of storage.ResendDeadChunk rows.
func (s *Server) outboundResendDead(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !configuredOutbound(s.inForce(), name) {
		writeError(w, http.StatusNotFound, noOutbound(name))
		return
	}
	q, ok := query(w, r, resendDeadParams)
	if !ok {
		return
	}
	p := storage.QueueResendDeadParams{Destination: name}
	var filters []string // which were given, never their values
	for _, b := range []struct {
		name string
		to   *time.Time
	}{{"since", &p.Since}, {"until", &p.Until}} {
		if v, given := q[b.name]; given {
			if *b.to, ok = parseTime(w, b.name, v); !ok {
				return
			}
			filters = append(filters, b.name)
		}
	}
	if !p.Since.IsZero() && !p.Until.IsZero() && !p.Until.After(p.Since) {
		badParam(w, "until", "must be after since")
		return
	}
	if v, given := q["limit"]; given {
		n, ok := positive(w, "limit", v, MaxResendDeadLimit)
		if !ok {
			return
		}
		p.Limit = int(n)
		filters = append(filters, "limit")
	}
	if s.refuseDrifted(w, "a resend-dead") {
		return
	}
	router, err := lanes.NewRouter(s.inForce())
	if err != nil {
		writeError(w, http.StatusInternalServerError, "this node's routes cannot be compiled: "+err.Error())
		return
	}
	p.Lane = func(d storage.DeadRow) (string, storage.ResendSkip) {
		return router.ResendLane(d.Inbound, name, d.Payload)
	}
	ctx, cancel := storeCtx(r, s.limits.storeWrite)
	defer cancel()
	res, err := s.o.Store.QueueResendDead(ctx, p)
	if left := res.NotRouted + res.Unparsable; left > 0 {
		s.o.Log.Warn().Str("destination", name).Int("not_routed", res.NotRouted).Int("unparsable", res.Unparsable).
			Str("token", principalOf(r).name).Str("remote", r.RemoteAddr).
			Msg("operator resend-dead: dead rows left dead, not resent, as the ingest would not queue their messages for this outbound now: no [[route]] in force sends them there (not_routed), or their stored bytes do not parse as HL7 (unparsable); they stay dead, and a later resend-dead looks at them again: restore the route (and reload) to resend them")
	}
	if res.Resent > 0 {
		s.stats.drop()
		s.o.Log.Info().Str("destination", name).Int("resent", res.Resent).Int64("first_queue_id", res.FirstID).Int64("last_queue_id", res.LastID).
			Strs("filters", filters).Str("token", principalOf(r).name).Str("remote", r.RemoteAddr).
			Msg("operator resend-dead: the outbound's dead rows are queued again at the tails of their lanes")
	}
	if err != nil {
		// The transactions that committed stay: a call again resends the rest.
		s.storeWriteFailed(w, "resend of the outbound's dead rows ("+strconv.Itoa(res.Resent)+" resent before it failed)", err)
		return
	}
	out := ResentDead{Outbound: name, Resent: res.Resent, NotRouted: res.NotRouted, Unparsable: res.Unparsable}
	if res.Resent > 0 {
		out.FirstID, out.LastID = &res.FirstID, &res.LastID
	}
	writeJSON(w, http.StatusOK, out)
}

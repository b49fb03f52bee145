package api

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/storage"
)

// Search defaults and bounds (GET /messages).
const (
	// DefaultSearchWindow is how far back from until (or now) a search
	// without since looks: a search reads every message of its window that
	// its filters must check, so it is always bounded.
	DefaultSearchWindow = 24 * time.Hour
	// DefaultSearchLimit and MaxSearchLimit bound the messages of a page.
	DefaultSearchLimit = 50
	MaxSearchLimit     = storage.MaxSearchLimit - 1 // the store's one more tells a next page
)

// searchParams are the parameters GET /messages takes, each at most once.
var searchParams = []string{"control_id", "inbound", "status", "since", "until", "limit", "before_id"}

// MessageList is GET /messages: one page of the messages found, newest
// first, and the window searched (since, and until or null for none, in
// RFC 3339), which the next page's request repeats with before_id.
type MessageList struct {
	Messages []MessageSummary `json:"messages"`
	Since    string           `json:"since"`
	Until    *string          `json:"until"`
	// NextBeforeID is the before_id of the next page, null on the last.
	NextBeforeID *int64 `json:"next_before_id"`
}

// MessageSummary is one message of GET /messages: GET /messages/{id}'s
// fields but the payload, with its queue rows' id, destination and status.
type MessageSummary struct {
	MessageHead
	Queue []QueueRowSummary `json:"queue"`
}

// QueueRowSummary is one queue row of a MessageSummary or of a Resent.
type QueueRowSummary struct {
	ID          int64  `json:"id"`
	Destination string `json:"destination"`
	Status      string `json:"status,omitempty"`
}

// Resent is POST /messages/{id}/resend: the new queue rows.
type Resent struct {
	MessageID int64             `json:"message_id"`
	Queue     []QueueRowSummary `json:"queue"`
}

// badParam answers 400 for query parameter name.
func badParam(w http.ResponseWriter, name, why string) {
	writeError(w, http.StatusBadRequest, "query parameter "+name+": "+why)
}

// query parses the request's query string and refuses a parameter not in
// known, or given twice or empty: a misspelt filter (controlid=) would
// otherwise widen the search, or resend, silently, and a misspelt limit of
// GET /lanes (limt=) list every lane.
func query(w http.ResponseWriter, r *http.Request, known []string) (map[string]string, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "the query string does not parse: "+err.Error())
		return nil, false
	}
	out := map[string]string{}
	for name, vs := range q {
		switch {
		case !slices.Contains(known, name):
			badParam(w, strconv.Quote(name), "unknown (known: "+strings.Join(known, ", ")+")")
			return nil, false
		case len(vs) > 1:
			badParam(w, name, "given "+strconv.Itoa(len(vs))+" times; give it once")
			return nil, false
		case vs[0] == "":
			badParam(w, name, "empty; leave it out for none")
			return nil, false
		case !validText(vs[0]):
			// PostgreSQL refuses such text in a parameter, and the request
			// was answered 503 as if the store were away.
			badParam(w, name, "not UTF-8 text, or holds a NUL character")
			return nil, false
		}
		out[name] = vs[0]
	}
	return out, true
}

// parseTime reads an RFC 3339 time of a query.
func parseTime(w http.ResponseWriter, name, v string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		why := "not an RFC 3339 time such as 2026-11-27T10:02:00Z or 2026-11-27T10:02:00-05:00"
		if strings.Contains(v, " ") {
			// A + in a query string is a space: the offset +01:00 lost it.
			why += " (a + in a URL's query is a space: write it %2B, or give the time in UTC with Z)"
		}
		badParam(w, name, why)
		return time.Time{}, false
	}
	if t.Before(time.Unix(0, 0)) {
		// No message was received before 1970, and the zero time stands
		// for "not given": since=0001-01-01T00:00:00Z was answered 503,
		// and the same until was dropped without a word.
		badParam(w, name, "must be 1970 or later")
		return time.Time{}, false
	}
	return t, true
}

// validText reports whether s can be a parameter of a store's query: text
// storage.ValidText leaves as it is (UTF-8 without NUL characters), as it
// makes all stored text.
func validText(s string) bool { return storage.ValidText(s) == s }

// positive reads a positive integer of a query.
func positive(w http.ResponseWriter, name, v string, most int64) (int64, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > most || strings.TrimLeft(v, "0123456789") != "" {
		badParam(w, name, "must be an integer from 1 to "+strconv.FormatInt(most, 10))
		return 0, false
	}
	return n, true
}

// messageSearch is GET /messages: the messages received in a window
// (since, until; the DefaultSearchWindow before until, or now, when since is
// not given), filtered by control_id, inbound and status, newest first, a
// page of limit at a time, metadata only.
func (s *Server) messageSearch(w http.ResponseWriter, r *http.Request) {
	q, ok := query(w, r, searchParams)
	if !ok {
		return
	}
	p := storage.MessageSearchParams{ControlID: q["control_id"], Inbound: q["inbound"], Status: q["status"], Limit: DefaultSearchLimit}
	switch p.Status {
	case "", storage.MessageRouted, storage.MessageUnrouted, storage.MessageRejected:
	default:
		badParam(w, "status", "a message's status is routed, unrouted or rejected (a delivery's status is its queue row's)")
		return
	}
	if v, given := q["until"]; given {
		if p.Until, ok = parseTime(w, "until", v); !ok {
			return
		}
	}
	if v, given := q["since"]; given {
		if p.Since, ok = parseTime(w, "since", v); !ok {
			return
		}
	} else if !p.Until.IsZero() {
		p.Since = p.Until.Add(-DefaultSearchWindow)
	} else {
		p.Since = time.Now().Add(-DefaultSearchWindow)
	}
	if !p.Until.IsZero() && !p.Until.After(p.Since) {
		badParam(w, "until", "must be after since ("+p.Since.Format(time.RFC3339Nano)+")")
		return
	}
	if v, given := q["limit"]; given {
		n, ok := positive(w, "limit", v, MaxSearchLimit)
		if !ok {
			return
		}
		p.Limit = int(n)
	}
	if v, given := q["before_id"]; given {
		if p.BeforeID, ok = positive(w, "before_id", v, 1<<63-1); !ok {
			return
		}
	}
	limit := p.Limit
	p.Limit++ // one more: is there a next page?
	ctx, cancel := storeCtx(r, s.limits.storeScan)
	defer cancel()
	found, err := s.o.Store.MessageSearch(ctx, p)
	if err != nil {
		s.storeFailed(w, "message search", err)
		return
	}
	s.readWorked()
	out := MessageList{Messages: []MessageSummary{}, Since: p.Since.UTC().Format(time.RFC3339Nano)}
	if !p.Until.IsZero() {
		u := p.Until.UTC().Format(time.RFC3339Nano)
		out.Until = &u
	}
	if len(found) > limit {
		found = found[:limit]
		next := found[limit-1].Message.ID
		out.NextBeforeID = &next
	}
	for _, f := range found {
		ms := MessageSummary{MessageHead: messageHead(f.Message), Queue: []QueueRowSummary{}}
		for _, qr := range f.Queue {
			ms.Queue = append(ms.Queue, QueueRowSummary{ID: qr.ID, Destination: qr.Destination, Status: qr.Status})
		}
		out.Messages = append(out.Messages, ms)
	}
	// As GET /messages/{id}'s: who searched, from where, how many they were
	// shown; never the values searched for, nor what was found.
	filters := []string{}
	for _, name := range []string{"control_id", "inbound", "status"} {
		if q[name] != "" {
			filters = append(filters, name)
		}
	}
	what := "messages searched: their metadata was shown"
	if r.Method == http.MethodHead { // served by the GET route: no body
		what = "messages searched (HEAD): nothing was shown"
	}
	s.o.Log.Info().Str("token", principalOf(r).name).Str("remote", r.RemoteAddr).Strs("filters", filters).Int("messages", len(out.Messages)).
		Msg(what)
	writeJSON(w, http.StatusOK, out)
}

// refuseDrifted answers 409 and reports true when this node's graph config
// differs from the primary's (Options.ConfigDrift): what, a resend, would
// follow routes the primary does not run.
func (s *Server) refuseDrifted(w http.ResponseWriter, what string) bool {
	if s.o.ConfigDrift == nil || !s.o.ConfigDrift() {
		return false
	}
	writeError(w, http.StatusConflict, "this node's graph config differs from the primary's (a reload on its way, or one that failed: its mf_config_drift turns 1 after a minute), and "+what+
		" follows the answering node's routes: it could queue messages in lanes the primary's routes do not make, out of order with the rest of their lane_key; call the primary's API, or wait for the reload (deploy the same config file to every node and run mf reload if one failed), then call again")
	return true
}

// inForce is the config this node runs now.
func (s *Server) inForce() *config.Config {
	if s.o.InForce != nil {
		if c := s.o.InForce(); c != nil {
			return c
		}
	}
	return s.o.Config
}

// messageResend is POST /messages/{id}/resend[?destination=NAME]: the message
// is queued again, for the destination named or for each its routes gave it
// (those of its queue rows), as a new row at the tail of the lane that
// destination's routes in force give it now, computed from the stored
// message as the ingest does.
func (s *Server) messageResend(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	q, ok := query(w, r, []string{"destination"})
	if !ok || s.refuseDrifted(w, "a resend") {
		return
	}
	ctx, cancel := storeCtx(r, s.limits.storeWrite)
	defer cancel()
	msg := "message " + strconv.FormatInt(id, 10)
	d, err := s.o.Store.MessageRead(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no "+msg)
		return
	}
	if err != nil {
		s.storeWriteFailed(w, "message read for a resend", err)
		return
	}
	m := d.Message
	switch m.Status {
	case storage.MessageRejected:
		writeError(w, http.StatusConflict, msg+" was rejected when it came (answered AR; GET /messages/"+strconv.FormatInt(id, 10)+" says why), so it was never queued: there is nothing to resend; have its sender send it again, corrected")
		return
	case storage.MessageUnrouted:
		writeError(w, http.StatusConflict, msg+" is unrouted: no [[route]] from inbound "+strconv.Quote(m.Inbound)+" matched it when it came, so it was never queued: there is nothing to resend; have its sender send it again once a route sends it somewhere")
		return
	}
	var had []string // its destinations, in the order they were queued
	for _, qr := range d.Queue {
		if !slices.Contains(had, qr.Destination) {
			had = append(had, qr.Destination)
		}
	}
	if len(had) == 0 {
		writeError(w, http.StatusConflict, msg+" has no queue row left (finished rows are purged after [store] retention_days): its destinations are not known any more, so it cannot be resent")
		return
	}
	cfg := s.inForce()
	configured := func(dest string) bool { return configuredOutbound(cfg, dest) }
	dests := had
	if dest, named := q["destination"]; named {
		if !configured(dest) {
			writeError(w, http.StatusUnprocessableEntity, "destination "+strconv.Quote(dest)+" is not an [[outbound]] of this node's config: name one of "+msg+"'s destinations ("+strings.Join(had, ", ")+") that is")
			return
		}
		if !slices.Contains(had, dest) {
			writeError(w, http.StatusConflict, msg+" was never queued for "+strconv.Quote(dest)+" (its destinations: "+strings.Join(had, ", ")+"): a resend goes only to a destination its routes gave it")
			return
		}
		dests = []string{dest}
	} else {
		for _, dest := range had {
			if !configured(dest) {
				writeError(w, http.StatusUnprocessableEntity, msg+"'s destination "+strconv.Quote(dest)+" is not an [[outbound]] of this node's config any more, and nothing would deliver it: resend it to each other destination with ?destination=NAME")
				return
			}
		}
	}
	// The lanes as the ingest gives them, by the routes in force now: a new
	// row in the lane its messages of the same key are queued in today.
	router, err := lanes.NewRouter(cfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "this node's routes cannot be compiled: "+err.Error())
		return
	}
	parsed, perr := hl7.Parse(m.Payload)
	if perr != nil {
		writeError(w, http.StatusConflict, msg+"'s stored bytes do not parse as HL7 v2 ("+perr.Error()+"), so its lane cannot be computed")
		return
	}
	picked := make([]storage.Delivery, 0, len(dests))
	for _, dest := range dests {
		lane, ok := router.LaneTo(m.Inbound, parsed, dest)
		if !ok {
			writeError(w, http.StatusConflict, "the [[route]]s in force no longer send "+msg+" (from inbound "+strconv.Quote(m.Inbound)+") to "+strconv.Quote(dest)+
				", so its lane there is not known: a resend follows the routes in force; restore the route (and reload), or resend it to another of its destinations with ?destination=NAME")
			return
		}
		picked = append(picked, storage.Delivery{Destination: dest, Lane: lane})
	}
	ids, err := s.o.Store.MessageResend(ctx, storage.MessageResendParams{MessageID: id, Deliveries: picked})
	switch {
	case errors.Is(err, storage.ErrNotFound):
		writeError(w, http.StatusNotFound, msg+" is gone, or its queue rows are: the purge deleted them as the resend ran")
		return
	case err != nil:
		s.storeWriteFailed(w, "message resend", err)
		return
	}
	s.stats.drop()
	who := principalOf(r)
	out := Resent{MessageID: id, Queue: []QueueRowSummary{}}
	for i, qid := range ids {
		// Never the lane: its key is often a patient id.
		s.o.Log.Info().Int64("message_id", id).Str("control_id", m.ControlID).Str("destination", picked[i].Destination).Int64("queue_id", qid).Str("token", who.name).
			Msg("operator resend: the message is queued again at the tail of its lane")
		out.Queue = append(out.Queue, QueueRowSummary{ID: qid, Destination: picked[i].Destination})
	}
	writeJSON(w, http.StatusOK, out)
}

package lanes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
)

// relanePage is how many rows Relane reads, and moves, at a time: one read
// and at most one write transaction per page (a test makes it small).
var relanePage = 1000

// LaneKeys returns, for each destination that c's routes name, how its
// messages are split into lanes: for each inbound that routes to it, in
// name order, "inbound=lane_key" ("inbound=" for none). Where several
// routes from one inbound name the destination with different lane_keys,
// the one whose filters match first decides, so their keys and filters are
// all written, in file order. Two configs that lane a destination alike
// give it the same text; it is what Relane records with its rows
// (storage.Store.QueueLaneKeyRecord), and a change of it makes the next
// graph lane them again. Texts longer than storage.MaxLaneKeyBytes become
// their SHA-256.
func LaneKeys(c *config.Config) map[string]string {
	type pair struct{ from, dest string }
	byPair := map[pair][]config.Route{}
	dests := map[string][]string{} // destination → its inbounds
	for _, rc := range c.Route {
		for _, d := range rc.To {
			p := pair{rc.From, d}
			if _, ok := byPair[p]; !ok {
				dests[d] = append(dests[d], rc.From)
			}
			byPair[p] = append(byPair[p], rc)
		}
	}
	out := map[string]string{}
	for dest, froms := range dests {
		slices.Sort(froms)
		parts := make([]string, 0, len(froms))
		for _, from := range froms {
			rs := byPair[pair{from, dest}]
			if !slices.ContainsFunc(rs, func(r config.Route) bool { return r.LaneKey != rs[0].LaneKey }) {
				parts = append(parts, from+"="+rs[0].LaneKey)
				continue
			}
			alts := make([]string, 0, len(rs))
			for _, r := range rs {
				f, _ := json.Marshal(r.Filter) // sorted keys
				alts = append(alts, r.LaneKey+" if "+string(f))
			}
			parts = append(parts, from+"=["+strings.Join(alts, ", ")+"]")
		}
		key := strings.Join(parts, ";")
		if len(key) > storage.MaxLaneKeyBytes {
			sum := sha256.Sum256([]byte(key))
			key = "sha256:" + hex.EncodeToString(sum[:])
		}
		out[dest] = key
	}
	return out
}

// relaneOf is the lane the routes give today to a message m of inbound
// that was routed to dest, as Route computes it and the ingest stores it
// (storage.NewMessage.Storable): the first route from inbound naming dest
// whose filters match. ok is false when no route from inbound names dest
// any more and dest's routes do not agree on one lane_key: the row keeps
// its lane. A route whose filters no longer match still lanes the message
// (it was routed there, and is delivered there): the first route from
// inbound naming dest gives its lane then.
func (r *Router) relaneOf(inbound, dest string, m *hl7.Message) (lane string, ok bool) {
	var first *route
	for i, rt := range r.byInbound[inbound] {
		if !slices.Contains(rt.to, dest) {
			continue
		}
		if rt.matches(m) {
			return storable(rt.lane(dest, m)), true
		}
		if first == nil {
			first = &r.byInbound[inbound][i]
		}
	}
	if first != nil {
		return storable(first.lane(dest, m)), true
	}
	var only *route
	for _, rts := range r.byInbound {
		for i, rt := range rts {
			if !slices.Contains(rt.to, dest) {
				continue
			}
			if only != nil && only.key != rt.key {
				return "", false
			}
			only = &rts[i]
		}
	}
	if only == nil {
		return "", false
	}
	return storable(only.lane(dest, m)), true
}

// storable is a lane as the ingest stores it (storage.NewMessage.Storable).
func storable(lane string) string { return storage.BoundLane(storage.ValidText(lane)) }

// utf8BOM is a byte order mark, which the inbounds drop before they parse.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// Relaned is what Relane did for one destination.
type Relaned struct {
	Destination string
	// From and To are the laning recorded and the one in force (LaneKeys);
	// From is "" when none was recorded.
	From, To string
	// Rows counts the destination's unfinished rows read; Moved those
	// moved to another lane; Kept those left in their lane because no
	// route from their inbound names the destination any more (or their
	// payload no longer parses).
	Rows, Moved, Kept int64
	// Lanes counts the lanes the unfinished rows are in afterwards.
	Lanes int
	Took  time.Duration
}

// RelaneBegin is the start of Relane that must come before the graph's
// inbounds store anything: for each destination whose laning (LaneKeys)
// differs from the one recorded with its rows, it records the laning as
// unknown (""), and it returns those destinations (sorted), the ones
// Relane moves.
//
// The inbounds store messages while Relane runs (so that a long move does
// not refuse every partner), laned by the lane_key in force. Should the
// move not end (the term lost, the node stopped, the database gone), the
// record must not say that those rows are laned by the old lane_key, which
// the next graph may run again: it would take the record for its own, move
// nothing, and a key's newer rows would be in a lane of the new lane_key,
// its older ones in one of the old. Unknown, every next graph walks the
// rows, whatever its lane_key.
func RelaneBegin(ctx context.Context, store storage.Store, fence storage.Fence, cfg *config.Config) ([]string, error) {
	have, err := store.QueueLaneKeys(ctx)
	if err != nil {
		return nil, err
	}
	var moving []string
	want := LaneKeys(cfg)
	for _, dest := range slices.Sorted(maps.Keys(want)) {
		was, ok := have[dest]
		if ok && was == want[dest] {
			continue
		}
		moving = append(moving, dest)
		if !ok || was == "" {
			continue // never recorded (or unknown): unknown already
		}
		if err := store.QueueLaneKeyRecord(ctx, storage.QueueLaneKeyRecordParams{Fence: fence, Destination: dest}); err != nil {
			return moving, fmt.Errorf("recording the lane_key of destination %s as unknown: %w", dest, err)
		}
	}
	return moving, nil
}

// Relane puts the unfinished rows of each destination whose laning
// (LaneKeys) differs from the one recorded with its rows into the lanes
// router makes today, then records the new laning, one destination after
// the other, and reports each to moved (when not nil) once its rows are
// moved (the destinations not moved by an earlier, interrupted call). It
// must run after promotion recovery (no row is in flight then, and none
// can be claimed meanwhile), under fence, before any lane of a destination
// it moves starts, and after RelaneBegin when the graph's inbounds run
// meanwhile. The lanes of the other destinations may run: a lane is of one
// destination, and the move reads and writes only the rows of the
// destination it moves.
//
// Why this keeps order: a row's lane is computed once, at ingest. Under a
// lane_key changed across a restart, a failover, or a reload a standby
// applied, a key's newer messages would go to another lane than its older
// ones still queued, with no order between the two (a patient's newer ADT
// delivered before an older one waiting out a retry). Relane computes each
// unfinished row's lane with the function the router uses, from its
// message, so every key's rows, old and new, are in one lane; within a
// lane the claim takes rows in id order, which is arrival order, so each
// new lane is FIFO (storage/postgres/sql/queue_claim_next.sql, THE FIFO
// ARGUMENT). A held head stays held in its new lane, where it blocks the
// rows of its new key behind it; rows ahead of it there are delivered
// first, being older. Finished rows (done, dead) are in no order and stay.
//
// The graph's inbounds store messages meanwhile (RelaneBegin), and that
// keeps the order too: such a message is laned at ingest by router, under
// the lane_key in force, so it is in its key's lane already, where the
// walk, should it read it, finds it (relaneOf computes what Route did) and
// leaves it; and it has a higher id than every row stored before the graph
// started (ids become visible in id order: THE FIFO ARGUMENT, (b)), the
// rows being moved included. Each lane starts only once the move of its
// destination has ended (Env.Moving), so it then holds its key's older
// rows, moved, below its newer ones, and sends them in id order. The move
// takes no lock the ingest waits for, but a page's write transaction
// (relanePage rows): on SQLite, whose one writer is either, an ingest
// waits for at most one page.
//
// It is idempotent: interrupted, it runs again at the next graph start,
// whatever lane_key that graph runs (the laning is recorded unknown before
// the first move, and recorded last), and rows already in their lane are
// not moved.
func Relane(ctx context.Context, store storage.Store, fence storage.Fence, cfg *config.Config, router *Router, moved func(Relaned)) error {
	want := LaneKeys(cfg)
	have, err := store.QueueLaneKeys(ctx)
	if err != nil {
		return err
	}
	for _, dest := range slices.Sorted(maps.Keys(want)) {
		if was, ok := have[dest]; ok && was == want[dest] {
			continue
		}
		r := Relaned{Destination: dest, From: have[dest], To: want[dest]}
		start := time.Now()
		if err := relaneDestination(ctx, store, fence, router, &r); err != nil {
			return fmt.Errorf("re-laning the queued rows of destination %s: %w", dest, err)
		}
		if err := store.QueueLaneKeyRecord(ctx, storage.QueueLaneKeyRecordParams{Fence: fence, Destination: dest, LaneKey: want[dest]}); err != nil {
			return fmt.Errorf("recording the lane_key of destination %s: %w", dest, err)
		}
		r.Took = time.Since(start)
		if moved != nil {
			moved(r)
		}
	}
	return nil
}

func relaneDestination(ctx context.Context, store storage.Store, fence storage.Fence, router *Router, r *Relaned) error {
	lanes := map[string]struct{}{}
	// A row moved to a lane the walk has not reached yet is read again
	// there: it is passed over.
	moved := map[int64]struct{}{}
	p := storage.QueueRelaneReadParams{Destination: r.Destination, Limit: relanePage}
	// Before the first move the recorded lane_key becomes "" (none
	// known), which no laning is: a move cut short (the term lost, the
	// database gone) leaves some rows in lanes of the old key and some in
	// lanes of the new, and whichever lane_key the next graph runs, it
	// must not take the record for its own and skip them.
	unknown := false
	for {
		page, err := store.QueueRelaneRead(ctx, p)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		var moves []storage.LaneMove
		for _, row := range page {
			if _, again := moved[row.ID]; again {
				continue
			}
			r.Rows++
			lane, ok := "", false
			if m, err := hl7.Parse(bytes.TrimPrefix(row.Payload, utf8BOM)); err == nil {
				lane, ok = router.relaneOf(row.Inbound, r.Destination, m)
			}
			if !ok {
				r.Kept++
				lane = row.Lane
			}
			lanes[lane] = struct{}{}
			if lane != row.Lane {
				moves = append(moves, storage.LaneMove{ID: row.ID, Lane: lane})
				moved[row.ID] = struct{}{}
			}
		}
		if len(moves) > 0 && !unknown {
			if err := store.QueueLaneKeyRecord(ctx, storage.QueueLaneKeyRecordParams{Fence: fence, Destination: r.Destination}); err != nil {
				return err
			}
			unknown = true
		}
		if len(moves) > 0 {
			n, err := store.QueueRelane(ctx, storage.QueueRelaneParams{Fence: fence, Moves: moves})
			if err != nil {
				return err
			}
			r.Moved += n
		}
		last := page[len(page)-1]
		p.AfterLane, p.AfterID = last.Lane, last.ID
	}
	r.Lanes = len(lanes)
	return nil
}

// Log reports r at INFO (or WARN when rows were kept in their lane): the
// destination, the laning before and after, the rows and lanes, the time
// taken. Never a lane name or a payload: lane keys are patient ids.
func (r Relaned) Log(log zerolog.Logger) {
	ev := log.Info()
	msg := "the destination's lane_key differs from the one its queued rows were laned by: moved them into the lanes of the lane_key in force, each key's rows in arrival order, before any of its lanes started"
	if r.From == "" {
		msg = "no lane_key was recorded for the destination's queued rows (a database of an mf that did not record it, or a new destination): put them in the lanes of the lane_key in force, each key's rows in arrival order, before any of its lanes started"
	}
	switch {
	case r.Rows == 0:
		ev, msg = log.Debug(), "recorded the destination's lane_key (no rows queued)"
	case r.Kept > 0:
		ev = log.Warn()
		msg += "; some rows were left in their lane: no route from their inbound sends to this destination any more and its routes have several lane_keys (or the message no longer parses), so they are delivered with no order against the rest"
	}
	ev.Str("destination", r.Destination).Str("lane_key_was", r.From).Str("lane_key", r.To).
		Int64("rows", r.Rows).Int64("moved", r.Moved).Int64("kept", r.Kept).Int("lanes", r.Lanes).
		Dur("took", r.Took).Msg(msg)
}

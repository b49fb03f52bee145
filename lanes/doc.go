// Package lanes is the outbound side of the graph: it routes each stored
// message to its destinations and delivers every destination's messages in
// FIFO order per lane, at least once.
//
// A lane is one destination's messages with one lane_key value (LaneName:
// "<destination>/<key>"); a route without lane_key puts the destination's
// messages in one lane named after it. A lane's head is its lowest row id
// still pending or in flight; the lane sends nothing newer until its head is
// recorded done or dead.
//
//	route.go        Router: which destinations, and which lane, a message goes to
//	manager.go      Manager: one lane actor per lane with work, woken by ingest
//	                (Ingested) and by its own rescans; owns the senders
//	lane.go         the lane actor: claim the head → send → record, retry with
//	                backoff, dead-letter or hold once attempts are exhausted
//	sender*.go      the destinations' protocols: MLLP, file, HTTP
//	relane.go       Relane: rows queued under another lane_key moved into the
//	                lanes of the one in force, before the lanes start
//	outage.go       one log line per destination outage, not one per attempt
//	metrics.go      delivery counters and latencies, labelled by destination
//
// Why a lane is delivered in order across crashes and failovers (a stranded
// head is reclaimed before anything newer) is argued in one place, beside
// the claim statement: storage/postgres/sql/queue_claim_next.sql, "THE FIFO
// ARGUMENT" (each dialect's copy says the same for its SQL).
//
// A row's lane is computed once, at ingest, under the lane_key in force
// then. Under a changed lane_key a key's newer messages would be in another
// lane than its older ones still queued, with no order between the two; so
// every graph (after promotion recovery, and at a single node's start)
// moves the unfinished rows of each destination whose lane_key differs
// from the one they were laned by (recorded per destination) into the
// lanes the routes make now (Relane, relane.go), each key's rows in id
// order, which is arrival order. The graph's inbounds
// store and acknowledge messages meanwhile (a move of 100,000 rows took up
// to 33 s, every partner refused while the inbounds waited for it): laned
// at ingest under the lane_key in force, each is in its key's lane
// already, with a higher id than every row being moved, and no lane of a
// destination being moved runs until its move has ended (Env.Moving), so
// each lane then holds its key's older rows below its newer ones. The
// other destinations' lanes run meanwhile: a lane is of one destination,
// and a move touches only its destination's rows. RelaneBegin records the
// old laning unknown before the inbounds open, so that a move cut short is
// done again, rows stored during it included. That covers a restart or
// a failover onto another lane_key, a standby that applied a reload while
// it ran no lanes, and a leader's live reload, which stops its graph (the
// lanes finish the delivery in hand), re-pends what was left in flight, and
// starts the new graph, which moves the rows first (package actors,
// root.reload). A row whose inbound no longer routes to its
// destination, under routes that disagree on the lane_key, keeps its lane:
// Relane says so at WARN, and the Manager still reports rows in lanes of
// another form (Manager.misplaced).
//
// An operator may hold an outbound (storage.Store.OutboundHold, from any
// node's API): a row of the shared database, so that it holds across
// restarts and failovers. The Manager reads the holds before it starts any
// lane and again at every listing of the lanes, which a hold or a release
// brings about by moving the queue's version; the primary's own API tells
// it at once besides (HoldChanged), before it answers. The claim itself
// refuses the rows of a held outbound (storage.Store.QueueClaimNext), on
// every node, from the hold's commit. While its outbound is held a lane
// claims and sends nothing (the send in hand finishes, the rows claimed
// behind it go back unsent) and no lane of it is started. Its
// messages are still stored and queued. Nothing is marked on its rows, so
// a release resumes each lane from its head, in order, and a held lane is
// neither blocked nor failing.
//
// An operator's retry of a pending row (storage.Store.QueueRelease: due
// now, with a fresh set of attempts) or skip of a lane's head
// (storage.Store.QueueSkip: set aside as dead) moves the queue's version
// too, so the Manager's next rescan lists the lanes and wakes the lane,
// blocked (parked) or backing off, whose head is claimable now; the
// primary's own API tells it at once besides (QueueChanged), before it
// answers, and the Manager lists the lanes then. The lane claims from its
// head as ever: a retried row behind the head waits for the rows ahead.
//
// Lane actors exist only under a leader: the graph that spawns the Manager
// is started on winning a term and stopped on losing it (package actors).
package lanes

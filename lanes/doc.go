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
//	outage.go       one log line per destination outage, not one per attempt
//	metrics.go      delivery counters and latencies, labelled by destination
//
// Why a lane is delivered in order across crashes and failovers (a stranded
// head is reclaimed before anything newer) is argued in one place, beside
// the claim statement: storage/postgres/sql/queue_claim_next.sql, "THE FIFO
// ARGUMENT" (each dialect's copy says the same for its SQL).
//
// Order per lane_key value holds only while the lane_key stays: rows keep
// the lane they were stored in, so under a changed lane_key a message's
// older ones of the same key may still be queued in another lane, with no
// order between the two. A leader therefore applies a reload that changes
// a destination's lane_key (Resplit) only once that destination has no
// unfinished row, its inbounds closed meanwhile, and refuses it otherwise
// (package actors, root.refuseResplit). A restart (or a failover) onto
// another lane_key is not prevented: the Manager says so at WARN when the
// change is to or from no lane_key, which leaves lane names of another
// form (Manager.misplaced).
//
// Lane actors exist only under a leader: the graph that spawns the Manager
// is started on winning a term and stopped on losing it (package actors).
package lanes

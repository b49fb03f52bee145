-- The lane claim, in one statement, in the same transaction as the fence
-- check (fence.sql): find the lane's head; if it is a stranded head (in
-- flight under an expired lease) reclaim it, or if it is pending, not held
-- and due, claim it: inflight under this node's lease, one attempt more.
-- The reclaim and the claim are one UPDATE, so a stranded head goes straight
-- to its new lease. One statement per lane, even in a lanes' batch
-- (lanebatch.go).
--
-- THE FIFO ARGUMENT. A lane delivers its rows in id order, one at a time,
-- across crashes and failovers, because:
--   (a) The head of a lane is its lowest id that is pending or inflight.
--       A claim starts at the head: if the head is inflight under a live
--       lease, pending but not yet due (a retry backing off), or held (an
--       exhausted head waiting for an operator), nothing is claimed and the
--       lane waits. A claim may take the rows right behind the head with it
--       ($5, below), only as an unbroken run; the lane's one actor sends them
--       in id order, each only once the one before it is recorded done (or
--       dead). It gives back those it has not sent (QueueGiveBack) before it
--       lets go of the run, when the row before them turns out to have lost
--       its claim (that row is delivered again first), and once too little of
--       their lease is left for a whole send (lanes/lane.go, aheadFor): a
--       send that outlived its row's lease would be re-pended and sent again.
--       A claim whose reply was lost (the write committed, its answer did
--       not come) leaves rows in flight that the actor never heard of and
--       never sent: it gives them back in place (QueueReleaseOwn,
--       queue_release_own.sql) before it claims again, holding none.
--       So row n+1 is sent only once row n is done or dead; and after a crash
--       the rows of a run not yet sent are in flight under the same lease as
--       the row being sent, and come back with it, behind it.
--   (b) Ids become visible in id order: ingest transactions are serialised
--       (message_ingest_lock.sql) and give a batch's queue ids in batch
--       order, so no claimer can see id n+1 while id n is still uncommitted.
--   (c) A head left inflight by a crashed or fenced leader, or by the graph
--       a reload stopped (a stranded head), is still the head: it is
--       reclaimed by this statement as soon as its lease expires (or
--       re-pended at once by promotion recovery, which root also runs once
--       that graph has stopped and before the next starts) and
--       re-delivered before anything newer of its lane. Retry and recovery
--       re-pend a row in place, keeping its id.
--   (d) Two claimers of one lane cannot both win: FOR UPDATE locks the head;
--       the second waits, re-reads it as inflight under a live lease (or
--       done) and claims nothing. (The engine never has two: a lane has one
--       actor, with one write outstanding at a time; see lanebatch.go.)
--   (e) The fence (fence.sql, FOR KEY SHARE on the lease row) means only the
--       current term's leader can claim; a paused old leader's claim fails.
--   (f) A lane is one key's rows under the destination's lane_key, and a
--       row's lane is computed at ingest. A graph that starts with another
--       lane_key for a destination than its rows were laned by (a restart,
--       a failover, a reload a standby applied) first moves each of its
--       unfinished rows into the lane its message has under the lane_key in
--       force (lanes.Relane, queue_relane.sql), before any lane runs and
--       after promotion recovery (nothing is in flight), fenced. A moved row
--       keeps its id, status and hold, so each new lane holds every
--       unfinished row of its key in id order, which is arrival order, and
--       (a) to (e) hold for it from there. Floors ($4) live only in a
--       running graph, so none spans a move.
--       The inbounds store and acknowledge messages during the move: each
--       is laned at ingest under the lane_key in force, with an id above
--       every row being moved (b), and stays in its lane (the walk computes
--       the same lane for it); the lanes start only once the move ends. A
--       move cut short is done again by the next graph, whatever lane_key
--       it runs: the old one is recorded unknown before anything is stored
--       (lanes.RelaneBegin).
-- A row may be delivered more than once (at least once), never out of order.
--
-- $4 is the floor (storage.QueueClaimNextParams.From): a row of this lane that
-- was its head once, so by (a) and (b) nothing below it is unfinished. It
-- changes no answer; it lets the index scan start at the lane's live rows
-- instead of walking the entries that finished rows leave in
-- mf_queue_lane_head until vacuum removes them (measured at 32 busy lanes:
-- 64 µs a claim without it, 46 µs with it).
--
-- $5 is how many rows to claim at most: the head alone (1), or the head and
-- the rows right behind it (storage.QueueAdvanceParams.Ahead): one statement
-- for a run of rows instead of one per row. The run is the lane's first $5
-- unfinished rows in id order, cut at the first one that is not claimable
-- (the running bool_and; COALESCE because bool_and skips NULLs), so it
-- never skips a row. RETURNING gives no order: the caller sorts by id.
--
-- Nothing is claimed while an operator holds the lane's outbound
-- (mf_outbound_holds, outbound_hold.sql): the statement reads the holds
-- itself, so a hold committed before it began stops it, whichever node's
-- API made the hold and whatever the leader's lanes know of it yet. Its
-- rows stay as they are (a stranded head too, until the sweep re-pends
-- it). The lookup reads that table once a statement (a Materialize over
-- its one page, nearly always empty: 1 buffer hit, against some 28 for
-- the rest of a claim of 8 rows); see bench/README.md for its cost.
--
-- The lease runs from clock_timestamp(), the moment this statement writes,
-- not now(), the start of its transaction: the fence before it (fence.sql)
-- waits as long as it must for a maintenance lock on the tables, and a
-- lease counted from before that wait came shorter by it, already expired
-- after a wait longer than the TTL, so that the sweep re-pended the row the
-- lane was sending (a duplicate). Its conditions keep now(): an earlier
-- clock only makes them stricter. (SQLite reads the clock per statement;
-- SQL Server's claim reads it again for the lease once its rows are
-- locked.) queue_extend_lease.sql and queue_retry.sql do the same.
--
-- The shape matters: every condition is on the lane's rows (the CTEs), and
-- the UPDATE finds its rows by primary key only. With conditions on the updated
-- row itself, a plan made while the queue was nearly empty looked rows up by
-- status and ran the head lookup once per pending row.
WITH unfinished AS (
    SELECT id, destination, status, next_attempt_at, held, lease_expires_at
      FROM mf_queue
     WHERE lane = $1 AND status IN ('pending', 'inflight') AND id >= $4
     ORDER BY id
     LIMIT $5
       FOR UPDATE
), run AS (
    SELECT id
      FROM (SELECT id, destination,
                   bool_and(COALESCE((status = 'pending' AND NOT held AND next_attempt_at <= now())
                                     OR (status = 'inflight' AND lease_expires_at <= now()), false))
                       OVER (ORDER BY id) AS claimable
              FROM unfinished) u
     WHERE claimable
       AND NOT EXISTS (SELECT 1 FROM mf_outbound_holds h WHERE h.outbound = u.destination)
)
UPDATE mf_queue q
   SET status = 'inflight',
       lease_owner = $2,
       lease_expires_at = clock_timestamp() + make_interval(secs => $3), -- see above
       attempts = q.attempts + 1,
       updated_at = now()
  FROM run, mf_messages m
 WHERE q.id = run.id
   AND m.id = q.message_id
RETURNING q.id, q.message_id, q.destination, q.lane, q.status, q.attempts, q.next_attempt_at,
          q.lease_owner, q.lease_expires_at, q.last_error, q.created_at, q.updated_at, q.held,
          m.payload, m.control_id, q.attempts_at_retry

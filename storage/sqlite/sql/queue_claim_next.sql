-- The lane claim, in one statement, in the same BEGIN IMMEDIATE transaction
-- as the fence check: find the lane's head; if it is a stranded head (in
-- flight under an expired lease) reclaim it, or if it is pending, not held
-- and due, claim it: inflight under this node's lease, one attempt more. The
-- reclaim and the claim are one UPDATE (as in PostgreSQL), so a stranded
-- head goes straight to its new lease, in one statement instead of two.
--
-- THE FIFO ARGUMENT. A lane delivers its rows in id order, one at a time,
-- across crashes and failovers, because:
--   (a) The head of a lane is its lowest id that is pending or inflight.
--       A claim starts at the head: if the head is inflight under a live
--       lease, pending but not yet due (a retry backing off), or held (an
--       exhausted head waiting for an operator), nothing is claimed and the
--       lane waits. A claim may take the rows right behind the head with it
--       (queue_claim_run.sql), only as an unbroken run; the lane's one actor
--       sends them in id order, each only once the one before it is recorded
--       done (or dead). It gives back those it has not sent (QueueGiveBack)
--       before it lets go of the run, when the row before them turns out to
--       have lost its claim (that row is delivered again first), and once too
--       little of their lease is left for a whole send (lanes/lane.go,
--       aheadFor): a send that outlived its row's lease would be re-pended
--       and sent again.
--       A claim whose reply was lost (the write committed, its answer did
--       not come) leaves rows in flight that the actor never heard of and
--       never sent: it gives them back in place (QueueReleaseOwn,
--       queue_release_own.sql) before it claims again, holding none.
--       So row n+1 is sent only once row n is done or dead;
--       and after a crash the rows of a run not yet sent are in flight under
--       the same lease as the row being sent, and come back with it, behind
--       it.
--   (b) Ids become visible in id order: SQLite has one writer at a time and
--       every write transaction is BEGIN IMMEDIATE, so ingest transactions
--       are serialised and id n commits no later than id n+1 (in the same
--       group commit, or an earlier one); no claimer can see id n+1 while id
--       n is still uncommitted. (AUTOINCREMENT also means an id is never
--       reused after a purge.)
--   (c) A head left inflight by a crashed or fenced leader, or by the graph
--       a reload stopped (a stranded head), is still the head: it is
--       reclaimed by this statement as soon as its lease expires (or
--       re-pended at once by promotion recovery, which root also runs once
--       that graph has stopped and before the next starts) and
--       re-delivered before anything newer of its lane. Retry and recovery
--       re-pend a row in place, keeping its id.
--   (d) Two claimers of one lane cannot both win: BEGIN IMMEDIATE takes the
--       single write lock before the head is read, and the writes of one
--       group commit run one after another in it, so the second claimer
--       reads the head only after the first's claim (committed, or earlier
--       in the same transaction), sees it inflight and claims nothing. (This holds across several handles on
--       one file too: the lock is SQLite's, not the process's.)
--   (e) The fence (fence.sql, under the same write lock) means only the
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
--       (a) to (e) hold for it from there. Floors (?4) live only in a
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
-- Nothing is claimed while an operator holds the lane's outbound
-- (mf_outbound_holds, outbound_hold.sql): the statement reads the holds
-- itself, under the same write lock as the hold's own write, so a hold
-- committed before it stops it, whatever the lanes know of it yet. One
-- probe of that table's primary key, nearly always empty.
--
-- The head is read by the scalar subquery (through the partial index
-- mf_queue_lane_head, whose WHERE term it repeats verbatim); the row is
-- claimed only if that head is pending, not held and due, or in flight under
-- an expired lease. RETURNING may not name other tables, so the payload and
-- control id come from correlated subqueries.
-- ?1 lane, ?2 owner, ?3 lease TTL in milliseconds, ?4 the floor (a row of the
-- lane that was its head once: nothing below it is unfinished; see
-- storage.QueueClaimNextParams.From).
UPDATE mf_queue
   SET status = 'inflight',
       lease_owner = ?2,
       lease_expires_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?3,
       attempts = attempts + 1,
       updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE id = (SELECT id
               FROM mf_queue
              WHERE lane = ?1 AND status IN ('pending', 'inflight') AND id >= ?4
              ORDER BY id
              LIMIT 1)
   AND ((status = 'pending' AND held = 0
         AND next_attempt_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
        OR (status = 'inflight'
         AND lease_expires_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)))
   AND NOT EXISTS (SELECT 1 FROM mf_outbound_holds h WHERE h.outbound = mf_queue.destination)
RETURNING id, message_id, destination, lane, status, attempts, next_attempt_at,
          lease_owner, lease_expires_at, last_error, created_at, updated_at, held,
          (SELECT m.payload FROM mf_messages m WHERE m.id = mf_queue.message_id),
          (SELECT m.control_id FROM mf_messages m WHERE m.id = mf_queue.message_id),
          attempts_at_retry

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
--       Only the head is ever claimed: if the head is inflight under a live
--       lease, pending but not yet due (a retry backing off), or held (an
--       exhausted head waiting for an operator), nothing is claimed and the
--       lane waits. So row n+1 is claimed only once row n is
--       done or dead.
--   (b) Ids become visible in id order: ingest transactions are serialised
--       (message_ingest_lock.sql) and give a batch's queue ids in batch
--       order, so no claimer can see id n+1 while id n is still uncommitted.
--   (c) A head left inflight by a crashed or fenced leader (a stranded head)
--       is still the head: it is reclaimed by this statement as soon as its
--       lease expires (or re-pended by promotion recovery at once) and
--       re-delivered before anything newer of its lane. Retry and recovery
--       re-pend a row in place, keeping its id.
--   (d) Two claimers of one lane cannot both win: FOR UPDATE locks the head;
--       the second waits, re-reads it as inflight under a live lease (or
--       done) and claims nothing. (The engine never has two: a lane has one
--       actor, with one write outstanding at a time; see lanebatch.go.)
--   (e) The fence (fence.sql, FOR SHARE on the lease row) means only the
--       current term's leader can claim; a paused old leader's claim fails.
-- A row may be delivered more than once (at least once), never out of order.
--
-- $4 is the floor (storage.QueueClaimNextParams.From): a row of this lane that
-- was its head once, so by (a) and (b) nothing below it is unfinished. It
-- changes no answer; it lets the index scan start at the lane's live rows
-- instead of walking the entries that finished rows leave in
-- mf_queue_lane_head until vacuum removes them (measured at 32 busy lanes:
-- 64 µs a claim without it, 46 µs with it).
--
-- The shape matters: every condition is on the head (the CTE), and the
-- UPDATE finds its row by primary key only. With conditions on the updated
-- row itself, a plan made while the queue was nearly empty looked rows up by
-- status and ran the head lookup once per pending row.
WITH head AS (
    SELECT id, status, next_attempt_at, held, lease_expires_at
      FROM mf_queue
     WHERE lane = $1 AND status IN ('pending', 'inflight') AND id >= $4
     ORDER BY id
     LIMIT 1
       FOR UPDATE
)
UPDATE mf_queue q
   SET status = 'inflight',
       lease_owner = $2,
       lease_expires_at = now() + make_interval(secs => $3),
       attempts = q.attempts + 1,
       updated_at = now()
  FROM head, mf_messages m
 WHERE q.id = head.id
   AND ((head.status = 'pending' AND NOT head.held AND head.next_attempt_at <= now())
        OR (head.status = 'inflight' AND head.lease_expires_at <= now()))
   AND m.id = q.message_id
RETURNING q.id, q.message_id, q.destination, q.lane, q.status, q.attempts, q.next_attempt_at,
          q.lease_owner, q.lease_expires_at, q.last_error, q.created_at, q.updated_at, q.held,
          m.payload, m.control_id

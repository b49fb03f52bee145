-- Lane claim, steps 2 and 3, in the same transaction as the fence check and
-- queue_reclaim_stranded_head.sql, for the lanes in $1 at once (lanebatch.go
-- combines the lanes' writes): $2 and $3 are each lane's lease owner and
-- lease seconds. Each lane is looked at on its own, exactly as if alone.
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
--       (message_ingest_lock.sql), so no claimer can see id n+1 while id n
--       is still uncommitted.
--   (c) A head left inflight by a crashed or fenced leader (a stranded head)
--       is reclaimed to pending by step 1 as soon as its lease expires, or by
--       promotion recovery at once, and is then the head again: it is
--       re-delivered before anything newer of its lane. Retry and recovery
--       re-pend a row in place, keeping its id.
--   (d) Two claimers of one lane cannot both win: FOR UPDATE locks the head;
--       the second waits, re-reads it as inflight and claims nothing. (The
--       engine never has two: a lane has one actor, and it has one write
--       outstanding at a time; see lanebatch.go.)
--   (e) The fence (fence.sql, FOR SHARE on the lease row) means only the
--       current term's leader can claim; a paused old leader's claim fails.
-- A row may be delivered more than once (at least once), never out of order.
WITH head AS (
    SELECT h.id, w.lessee, w.ttl
      FROM unnest($1::text[], $2::text[], $3::float8[]) AS w(lane, lessee, ttl)
     CROSS JOIN LATERAL (
            SELECT id, status, next_attempt_at, held
              FROM mf_queue
             WHERE lane = w.lane AND status IN ('pending', 'inflight')
             ORDER BY id
             LIMIT 1
               FOR UPDATE
           ) h
     WHERE h.status = 'pending'
       AND NOT h.held
       AND h.next_attempt_at <= now()
)
UPDATE mf_queue q
   SET status = 'inflight',
       lease_owner = head.lessee,
       lease_expires_at = now() + make_interval(secs => head.ttl),
       attempts = q.attempts + 1,
       updated_at = now()
  FROM head, mf_messages m
 WHERE q.id = head.id
   AND m.id = q.message_id
RETURNING q.id, q.message_id, q.destination, q.lane, q.status, q.attempts, q.next_attempt_at,
          q.lease_owner, q.lease_expires_at, q.last_error, q.created_at, q.updated_at, q.held,
          m.payload, m.control_id

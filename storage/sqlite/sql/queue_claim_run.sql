-- The lane claim of a run (storage.QueueAdvanceParams.Ahead above 0): the
-- head, as queue_claim_next.sql claims it, and the rows right behind it, in
-- one statement, in the same BEGIN IMMEDIATE transaction as the fence check.
-- The FIFO argument is beside queue_claim_next.sql; (a) there says how a run
-- keeps order. The engine does not ask SQLite for runs (Store.ClaimAhead):
-- this statement cost more than the head claims it saves, in process.
--
-- Nothing is claimed while an operator holds the lane's outbound, as in
-- queue_claim_next.sql.
--
-- The run is read by the subquery (through the partial index
-- mf_queue_lane_head, whose WHERE term it repeats verbatim): the lane's first
-- ?5 unfinished rows in id order, cut at the first one that is not claimable
-- (the running count of rows that are not), so it never skips a row. ?5 is 1
-- for the head alone, more with storage.QueueAdvanceParams.Ahead, at most the
-- inner LIMIT (maxRun in sqlite.go). That LIMIT is a constant on purpose:
-- bound to ?5, it made SQLite re-prepare the statement at every call
-- (measured: sqlite3Reprepare 38% of mf's CPU, delivery halved). RETURNING
-- may not name other tables, so the payload and control id come from
-- correlated subqueries, and it gives no order: the caller sorts by id.
-- ?1 lane, ?2 owner, ?3 lease TTL in milliseconds, ?4 the floor (a row of the
-- lane that was its head once: nothing below it is unfinished; see
-- storage.QueueClaimNextParams.From), ?5 how many rows at most.
UPDATE mf_queue
   SET status = 'inflight',
       lease_owner = ?2,
       lease_expires_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?3,
       attempts = attempts + 1,
       updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE id IN (SELECT id
                FROM (SELECT id,
                             sum(CASE WHEN (status = 'pending' AND held = 0
                                            AND next_attempt_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
                                        OR (status = 'inflight'
                                            AND lease_expires_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
                                      THEN 0 ELSE 1 END) OVER (ORDER BY id) AS blocked,
                             row_number() OVER (ORDER BY id) AS n
                        FROM (SELECT id, status, held, next_attempt_at, lease_expires_at
                                FROM mf_queue
                               WHERE lane = ?1 AND status IN ('pending', 'inflight') AND id >= ?4
                               ORDER BY id
                               LIMIT 16))
               WHERE blocked = 0 AND n <= ?5)
   AND NOT EXISTS (SELECT 1 FROM mf_outbound_holds h WHERE h.outbound = mf_queue.destination)
RETURNING id, message_id, destination, lane, status, attempts, next_attempt_at,
          lease_owner, lease_expires_at, last_error, created_at, updated_at, held,
          (SELECT m.payload FROM mf_messages m WHERE m.id = mf_queue.message_id),
          (SELECT m.control_id FROM mf_messages m WHERE m.id = mf_queue.message_id),
          attempts_at_retry

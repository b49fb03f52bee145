-- Operator skip: the lane's head, when it is pending, is set aside and its
-- lane moves on. Only the head: a row with a lower id of the same lane still
-- pending or in flight refuses the skip (storage.NotHead; the look is
-- queue_skip_refused.sql), so that a mistyped id cannot drop a message
-- queued behind a healthy head. The check is in this statement, under the
-- write lock, and cannot go stale anyway: ids only grow (AUTOINCREMENT) and
-- a finished row never comes back, so once no row is ahead none ever will
-- be. The subquery reads mf_queue_lane_head, whose WHERE term it repeats
-- verbatim (see storage/postgres/sql/queue_skip.sql for its shape).
-- ?1 id, ?2 reason.
UPDATE mf_queue
   SET status = 'dead', held = 0, last_error = ?2, last_error_detail = '', updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE id = ?1 AND status = 'pending'
   AND (SELECT a.id
          FROM mf_queue a
         WHERE a.lane = mf_queue.lane AND a.status IN ('pending', 'inflight') AND a.id < mf_queue.id
         ORDER BY a.id
         LIMIT 1) IS NULL
 RETURNING message_id, destination

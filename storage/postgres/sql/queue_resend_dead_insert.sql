-- An operator's resend-dead (storage.Store.QueueResendDead): a new pending
-- row of destination $1 for each element of $2 (message ids) and $3 (lanes,
-- each the one the routes in force give the message now), given ids in
-- that order (ORDER BY), after
-- message_ingest_lock.sql in the same transaction, as message_resend.sql:
-- each row is the newest of its lane, and a later queue id never becomes
-- visible before an earlier one (the lane claim's FIFO argument, (b)).
INSERT INTO mf_queue (message_id, destination, lane)
SELECT d.message_id, $1, d.lane
  FROM unnest($2::bigint[], $3::text[]) WITH ORDINALITY AS d(message_id, lane, ord)
 ORDER BY d.ord
RETURNING id

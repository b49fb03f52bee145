-- An operator's resend (storage.Store.MessageResend): new pending queue rows
-- of message $1, one per element of $2 (destinations) and $3 (lanes), given
-- ids in that order (ORDER BY), after message_ingest_lock.sql in the same
-- transaction: like an ingest, so that a later queue id never becomes visible
-- before an earlier one (the lane claim's FIFO argument, (b)). Each row is
-- the newest of its lane: it is delivered after every row queued there
-- before it. No row (and ErrNotFound) when the message does not exist.
INSERT INTO mf_queue (message_id, destination, lane)
SELECT m.id, d.destination, d.lane
  FROM mf_messages m
 CROSS JOIN unnest($2::text[], $3::text[]) WITH ORDINALITY AS d(destination, lane, ord)
 WHERE m.id = $1
 ORDER BY d.ord
RETURNING id

-- One message and its queue rows, in delivery order.
WITH m AS (
    INSERT INTO mf_messages (inbound, control_id, message_type, payload, status, error)
    VALUES ($1, $2, $3, $4, $5, $6)
    RETURNING id
), q AS (
    INSERT INTO mf_queue (message_id, destination, lane)
    SELECT m.id, d.destination, d.lane
      FROM m, unnest($7::text[], $8::text[]) WITH ORDINALITY AS d(destination, lane, ord)
     ORDER BY d.ord
    RETURNING id
)
SELECT m.id, COALESCE((SELECT array_agg(q.id ORDER BY q.id) FROM q), '{}'::bigint[]) FROM m

-- Completions of several lanes at once (lanebatch.go): the arrays are the
-- claims (queue id, lease owner, attempt). Only a claim that is still current
-- may finish its row: same owner, same attempt, still inflight (even if its
-- lease expired, no one re-claimed it). Returns the ids it finished; a claim
-- whose id is missing was lost.
UPDATE mf_queue q
   SET status = 'done', lease_owner = '', lease_expires_at = NULL, updated_at = now()
  FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS c(id, owner, attempt)
 WHERE q.id = c.id AND q.status = 'inflight' AND q.lease_owner = c.owner AND q.attempts = c.attempt
RETURNING q.id

-- ?1 id, ?2 owner, ?3 attempt, ?4 TTL in milliseconds.
UPDATE mf_queue
   SET lease_expires_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?4,
       updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE id = ?1 AND status = 'inflight' AND lease_owner = ?2 AND attempts = ?3

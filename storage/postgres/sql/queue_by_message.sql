SELECT id, message_id, destination, lane, status, attempts, next_attempt_at, lease_owner,
       lease_expires_at, last_error, created_at, updated_at, held, last_error_detail,
       COALESCE(resent_as, 0)
  FROM mf_queue WHERE message_id = $1 ORDER BY id

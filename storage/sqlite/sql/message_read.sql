SELECT id, inbound, received_at, control_id, message_type, payload, status, error
  FROM mf_messages WHERE id = ?1

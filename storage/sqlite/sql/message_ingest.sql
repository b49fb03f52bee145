-- One message of an ingest batch; its queue rows follow, one
-- message_ingest_queue.sql each, in delivery order. The whole batch is one
-- BEGIN IMMEDIATE transaction: SQLite has one writer at a time, so ingest
-- transactions are serialised and a later queue id never becomes visible
-- before an earlier one (PostgreSQL needs message_ingest_lock.sql for this).
INSERT INTO mf_messages (inbound, received_at, control_id, message_type, payload, status, error)
VALUES (?1, CAST(round(unixepoch('subsec') * 1000) AS INTEGER), ?2, ?3, ?4, ?5, ?6)

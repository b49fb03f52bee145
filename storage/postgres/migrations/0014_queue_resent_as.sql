-- A dead row an operator's resend-dead (POST /outbounds/{name}/resend-dead,
-- queue_resend_dead_*.sql) queued again: the id of the new row of its
-- message, NULL while it was not. The row stays dead (the purge treats it as
-- one, mf_queue_dead counts it); the mark is what keeps a second call from
-- resending it again. A status of its own ('resent') would have had every
-- statement, check and gauge that knows the statuses learn it. No index: a
-- destination's dead rows are found through mf_queue_dead, and are few
-- beside its other rows. A nullable column with no default is added without
-- rewriting the table.
ALTER TABLE mf_queue ADD COLUMN resent_as bigint;

-- The rows an operator's resend-dead queues again (queue_resend_dead.sql),
-- as a table-valued parameter: each dead row, its message and the lane of
-- its new row, which the Go code computes from the message by the routes
-- in force between the batch that locks the dead rows
-- (queue_resend_dead_pick.sql) and the one that inserts. ord is their order
-- (the dead rows' id order), given to the new rows' ids.
CREATE TYPE mf_resend_dead AS TABLE (
    ord        INT           NOT NULL PRIMARY KEY,
    id         BIGINT        NOT NULL,
    message_id BIGINT        NOT NULL,
    lane       NVARCHAR(MAX) NOT NULL
);

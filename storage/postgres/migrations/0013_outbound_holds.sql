-- Outbounds an operator has held (POST /outbounds/{name}/hold): a row is a
-- hold, released by deleting it (POST /outbounds/{name}/release). While an
-- outbound has one, the leader's lanes for it claim and send nothing;
-- messages are still stored and queued for it. Kept here, not in a node's
-- memory, so that a hold made through any node's API survives restarts and
-- failovers. Not fenced: operators act from any node, standbys too.
-- held_at is when the hold was made (the database clock); holding a held
-- outbound again keeps it.
CREATE TABLE mf_outbound_holds (
    outbound text        PRIMARY KEY,
    held_at  timestamptz NOT NULL DEFAULT now()
);

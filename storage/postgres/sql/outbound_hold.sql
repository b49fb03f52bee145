-- Hold outbound $1, unless it is held already (its held_at stays): an
-- operator's hold, idempotent. Returns when it was held, and whether this
-- statement made the hold. One statement: an insert that did nothing and a
-- read after it, each with its own snapshot, found no row when a release
-- committed between them (the hold failed, the outbound left unheld); DO
-- UPDATE locks the row that stands, so a concurrent release waits, or
-- this inserts anew. xmax is 0 in a row version this statement inserted.
INSERT INTO mf_outbound_holds (outbound, held_at) VALUES ($1, now())
ON CONFLICT (outbound) DO UPDATE SET held_at = mf_outbound_holds.held_at
RETURNING held_at, xmax = 0

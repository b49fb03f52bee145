-- Hold outbound $1, unless it is held already (its held_at stays): an
-- operator's hold, idempotent. Affects one row when it made the hold.
INSERT INTO mf_outbound_holds (outbound, held_at) VALUES ($1, now())
ON CONFLICT (outbound) DO NOTHING

-- When outbound $1 was held; no row if it is not.
SELECT held_at FROM mf_outbound_holds WHERE outbound = $1

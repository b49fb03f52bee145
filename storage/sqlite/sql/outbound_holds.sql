-- The held outbounds, by name.
SELECT outbound, held_at FROM mf_outbound_holds ORDER BY outbound

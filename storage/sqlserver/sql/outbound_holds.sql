-- The held outbounds, by name.
SET NOCOUNT ON;
SELECT outbound, held_at FROM mf_outbound_holds ORDER BY outbound;

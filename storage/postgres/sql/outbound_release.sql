-- Release outbound $1's hold, if any: affects one row when it had one.
DELETE FROM mf_outbound_holds WHERE outbound = $1

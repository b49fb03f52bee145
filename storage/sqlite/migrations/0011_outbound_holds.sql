-- Outbounds an operator has held: see
-- storage/postgres/migrations/0013_outbound_holds.sql. Times are Unix
-- milliseconds, as everywhere in this dialect.
CREATE TABLE mf_outbound_holds (
    outbound TEXT    NOT NULL PRIMARY KEY,
    held_at  INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
) STRICT;

-- The database's DELAYED_DURABILITY: DISABLED, ALLOWED or FORCED. FORCED
-- makes every commit delayed durable (acknowledged before its log records
-- are on disk) whatever the transaction asks. mf asks for none, so ALLOWED
-- is as good as DISABLED for it.
SELECT delayed_durability_desc FROM sys.databases WHERE database_id = DB_ID()

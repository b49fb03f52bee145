-- An operator's search (storage.Store.MessageSearch): one page of messages,
-- newest first, each with its queue rows (metadata only, never a payload);
-- see storage/postgres/sql/message_search.sql. @since <= received_at <
-- @until bounds the walk of mf_messages_received_at, whose entries hold the
-- clustered key (id) too, so a backward walk gives the order itself.
--
-- @since and @until come as text (ISO 8601, UTC, to the microsecond) and are
-- converted here: go-mssqldb sends a time.Time as DATETIMEOFFSET, which
-- compared with a DATETIME2 column converts by the session's offset rules,
-- not as UTC.
--
-- control_id and inbound are NVARCHAR(MAX) in the database's collation,
-- which often ignores case and always trailing spaces: matched through a
-- binary collation and DATALENGTH too, they match exactly, as in PostgreSQL
-- and SQLite. RECOMPILE: the plan is made for this window and these filters
-- (a plan for unknown variables may walk the clustered index instead of the
-- window); an operator's search is rare, its compile cheap beside its read. @control_id, @inbound, @status: N'' is none (DATALENGTH: = ignores trailing blanks, and a control id of blanks is a filter). @before is the
-- cursor (MaxInt64: none); @limit the page's size.
SET NOCOUNT ON;
DECLARE @from DATETIME2(6) = CONVERT(DATETIME2(6), @since, 126);
DECLARE @to DATETIME2(6) = CONVERT(DATETIME2(6), @until, 126);
DECLARE @cursor_at DATETIME2(6) = (SELECT received_at FROM mf_messages WHERE id = @before);
DECLARE @top DATETIME2(6) = COALESCE(@cursor_at, @to);

WITH page AS (
    SELECT TOP (@limit) m.id, m.inbound, m.received_at, m.control_id, m.message_type, m.status, m.error
      FROM mf_messages AS m
     WHERE m.received_at >= @from AND m.received_at < @to
       AND m.received_at <= @top
       AND (m.received_at < @cursor_at OR m.id < @before)
       AND (DATALENGTH(@control_id) = 0 OR (m.control_id COLLATE Latin1_General_100_BIN2 = @control_id
                                  AND DATALENGTH(m.control_id) = DATALENGTH(@control_id)))
       AND (DATALENGTH(@inbound) = 0 OR (m.inbound COLLATE Latin1_General_100_BIN2 = @inbound
                               AND DATALENGTH(m.inbound) = DATALENGTH(@inbound)))
       AND (DATALENGTH(@status) = 0 OR m.status = @status)
     ORDER BY m.received_at DESC, m.id DESC
)
SELECT p.id, p.inbound, p.received_at, p.control_id, p.message_type, p.status, p.error,
       q.id, q.destination, q.status
  FROM page AS p
  LEFT JOIN mf_queue AS q ON q.message_id = p.id
 ORDER BY p.received_at DESC, p.id DESC, q.id
OPTION (RECOMPILE);

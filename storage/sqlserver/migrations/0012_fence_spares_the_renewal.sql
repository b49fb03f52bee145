-- The fence locks a row of its own, mf_leader_term, instead of the lease
-- row, so that it still stops an election but no longer stops the leader's
-- own renewal.
--
-- A fenced write held the lease row shared (HOLDLOCK) from its fence to its
-- commit, and every UPDATE of that row waits for a shared lock, the
-- renewal's and the resignation's too: a write that waited on anything (a
-- row an operator's open session had locked, a slow statement) held the
-- renewal behind it, and the primary fenced itself. Now the fence holds the
-- row of mf_leader_term shared (fence.sql), and only an election writes that
-- row: the trigger below copies owner and term there, in the transaction of
-- the UPDATE of the lease that changed them, whatever version of mf sent it
-- (an older node, during a rolling upgrade, knows nothing of this table).
-- The copy needs an exclusive lock on the row, so an election waits for
-- every fenced write in progress, and a fence that comes after it waits for
-- its commit and then finds the new term: the writes of term T still commit
-- before term T+1 begins. A renewal, a resignation and an election attempt
-- that elects nobody change neither owner nor term: the trigger leaves
-- mf_leader_term untouched, and they wait for no fenced write. The trigger
-- must stay enabled: without it an election would leave the old term there,
-- the new leader's writes would all be fenced, and the old leader's not.
CREATE TABLE mf_leader_term (
    name  NVARCHAR(16)  COLLATE Latin1_General_100_BIN2 NOT NULL
          CONSTRAINT mf_leader_term_pk PRIMARY KEY
          CONSTRAINT mf_leader_term_name_ck CHECK (name = N'leader'),
    owner NVARCHAR(450) COLLATE Latin1_General_100_BIN2 NOT NULL,
    term  BIGINT        NOT NULL
);

-- The trigger fires for every UPDATE of the lease, one that matched no row
-- too (inserted and deleted are then empty), and runs in its transaction.
-- Owners compare with DATALENGTH as well: T-SQL pads the shorter string
-- with spaces before comparing.
GO
CREATE TRIGGER mf_leader_lease_term_copy ON mf_leader_lease
AFTER UPDATE
AS
BEGIN
    SET NOCOUNT ON;
    IF EXISTS (SELECT 1
                 FROM inserted AS i
                 JOIN deleted AS d ON d.name = i.name
                WHERE i.term <> d.term
                   OR i.owner <> d.owner
                   OR DATALENGTH(i.owner) <> DATALENGTH(d.owner))
        UPDATE t
           SET owner = i.owner, term = i.term
          FROM mf_leader_term AS t
          JOIN inserted AS i ON i.name = t.name;
END;
GO

-- Filled once the trigger exists, and read as the fence reads (HOLDLOCK:
-- the latest committed row, whatever READ_COMMITTED_SNAPSHOT says, locked
-- until the migration commits): an election committed before this read is
-- read, and one after it waits for the migration and then moves the row.
INSERT INTO mf_leader_term (name, owner, term)
SELECT name, owner, term
  FROM mf_leader_lease WITH (HOLDLOCK, ROWLOCK);

-- Lane claim, in the same transaction as the fence check (fence.sql). The
-- three steps of DESIGN §4 in one batch:
--   1. reclaim this lane's stranded head: the head in flight under an expired
--      lease goes back to pending;
--   2. read the lane head: the lowest id of the lane that is pending or
--      inflight;
--   3. claim it only if it is pending, not held (an exhausted head waiting
--      for an operator) and due (next_attempt_at <= now), and its outbound
--      is not held by an operator (mf_outbound_holds, outbound_hold.sql):
--      the batch reads the holds itself, so a hold committed before it
--      began stops it, whichever node's API made the hold and whatever the
--      leader's lanes know of it yet. One probe of that table's primary
--      key, nearly always empty.
-- The head is found and locked first, because steps 1 and 3 both act on it.
-- Then, with @max above 1 (storage.QueueAdvanceParams.Ahead), the rows right
-- behind a claimed head are claimed one after another, each locked before it
-- is looked at, stopping at the first that is neither pending (not held,
-- due) nor in flight under an expired lease, or at @max rows: an unbroken
-- run, never skipping a row.
--
-- THE FIFO ARGUMENT. A lane delivers its rows in id order, one at a time,
-- across crashes and failovers, because:
--   (a) The head of a lane is its lowest id that is pending or inflight.
--       A claim starts at the head: if the head is inflight under a live
--       lease, pending but not yet due (a retry backing off), or held (an
--       exhausted head waiting for an operator), nothing is claimed and the
--       lane waits. A claim may take the rows right behind the head with it
--       (@max), only as an unbroken run; the lane's one actor sends them in
--       id order, each only once the one before it is recorded done (or
--       dead). It gives back those it has not sent (QueueGiveBack) before it
--       lets go of the run, when the row before them turns out to have lost
--       its claim (that row is delivered again first), and once too little of
--       their lease is left for a whole send (lanes/lane.go, aheadFor): a
--       send that outlived its row's lease would be re-pended and sent again.
--       A claim whose reply was lost (the write committed, its answer did
--       not come) leaves rows in flight that the actor never heard of and
--       never sent: it gives them back in place (QueueReleaseOwn,
--       queue_release_own.sql) before it claims again, holding none.
--       So row n+1 is sent only once row n is done or dead; and after a crash
--       the rows of a run not yet sent are in flight under the same lease as
--       the row being sent, and come back with it, behind it.
--   (b) Ids become visible in id order: ingest transactions are serialised
--       (the schema's ingest application lock in message_ingest.sql, held
--       to commit), so no claimer can see id n+1 while id n is still
--       uncommitted.
--   (c) A head left inflight by a crashed or fenced leader, or by the graph
--       a reload stopped (a stranded head), is reclaimed to pending by step 1
--       as soon as its lease expires, or at once by promotion recovery (which
--       root also runs between a reload's two graphs), and is then the head
--       again: it is
--       re-delivered before anything newer of its lane. Retry and recovery
--       re-pend a row in place, keeping its id.
--   (d) Two claimers of one lane cannot both win: each takes an update lock
--       on the head row (UPDLOCK, held until commit) before it looks at the
--       row's status; the second waits, then reads the row as the first left
--       it (inflight: it claims nothing; finished: it moves on to the next
--       head) and never claims a row the first holds.
--   (e) The fence (fence.sql, a shared lock on the term row held to commit)
--       means only the current term's leader can claim; a paused old
--       leader's claim fails.
--   (f) A lane is one key's rows under the destination's lane_key, and a
--       row's lane is computed at ingest. A graph that starts with another
--       lane_key for a destination than its rows were laned by (a restart,
--       a failover, a reload a standby applied) first moves each of its
--       unfinished rows into the lane its message has under the lane_key in
--       force (lanes.Relane, queue_relane.sql), before any lane runs and
--       after promotion recovery (nothing is in flight), fenced. A moved row
--       keeps its id, status and hold, so each new lane holds every
--       unfinished row of its key in id order, which is arrival order, and
--       (a) to (e) hold for it from there. Floors (@from) live only in a
--       running graph, so none spans a move.
--       The inbounds store and acknowledge messages during the move: each
--       is laned at ingest under the lane_key in force, with an id above
--       every row being moved (b), and stays in its lane (the walk computes
--       the same lane for it); the lanes start only once the move ends. A
--       move cut short is done again by the next graph, whatever lane_key
--       it runs: the old one is recorded unknown before anything is stored
--       (lanes.RelaneBegin).
-- A row may be delivered more than once (at least once), never out of order.
--
-- WHY FIND FIRST, LOCK SECOND. Locking the head while reading it through
-- mf_queue_lane_head would lock the index key first and the row second, the
-- reverse of every UPDATE by id (complete, retry, dead, extend: the row
-- first, then the index keys it changes). A claimer polling a lane while the
-- head's holder completes it would deadlock with it. So the candidate head is
-- read without keeping locks, then the row itself is locked by id and its
-- status re-read. Every writer of mf_queue thus locks rows before index keys.
-- If the candidate finished in between, the loop takes the next one: nothing
-- with a lower id can become pending or inflight again (finished rows never
-- come back, and by (b) no lower id can still be uncommitted), so the first
-- candidate found still unfinished under the lock is the head.
--
-- THE LEASE runs from a clock read once the run is claimed, every row of it
-- locked, not from @now: after @now the loop locks each row behind the head
-- (UPDLOCK), and may wait for each, so a lease counted from @now came
-- shorter by those waits, expired already after waits longer than the TTL,
-- and the sweep re-pended the row the lane was sending (a duplicate; as
-- PostgreSQL's clock_timestamp(), storage/postgres/sql/queue_claim_next.sql).
-- The claim's UPDATEs leave the lease to one UPDATE after the loop; nothing
-- else sees the rows before commit. The conditions keep @now: an earlier
-- clock only makes them stricter.
--
-- READ COMMITTED, WITH OR WITHOUT READ_COMMITTED_SNAPSHOT. The claim is
-- correct in both modes:
--   * The candidate read keeps no locks. With READ_COMMITTED_SNAPSHOT ON it
--     reads the last committed versions; with it OFF it reads committed rows,
--     waiting for uncommitted ones. Either way it sees only committed rows,
--     and it only proposes a candidate: it decides nothing.
--   * The locked read (UPDLOCK) is never versioned: it reads the latest
--     committed row, waiting for any writer, and the update lock is held to
--     commit, so the status it saw can change only by this transaction.
--     HOLDLOCK adds nothing while the row exists; if the row vanished (purged
--     in between) it keeps the gap locked until commit, and the loop goes on.
--   * The UPDATEs address the locked row by id; SQL Server reads an UPDATE's
--     target rows with update locks in both modes (row versioning applies
--     only to reads of other tables).
--   * The final SELECT reads this transaction's own change, which every mode
--     shows to its own transaction, and the message, which is immutable and
--     was committed with the queue row.
--   * The fence is a SERIALIZABLE (HOLDLOCK) read: locking in both modes.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- A lane's write: each lock is waited for at most 500 ms (error 1222 after),
-- in this batch only (see laneLockWait in sqlserver.go). XACT_ABORT makes
-- the timeout end the batch and the transaction: without it, SQL Server
-- cancels only the statement that waited and runs the rest of the batch.
SET LOCK_TIMEOUT 500;

DECLARE @head BIGINT, @candidate BIGINT, @status NVARCHAR(16), @due DATETIME2(6),
        @lease_expires_at DATETIME2(6), @held BIT, @tries INT = 0,
        @destination NVARCHAR(450), @outbound_held BIT = 0;

-- Step 2: the head, found through mf_queue_lane_head (the hint keeps the plan
-- a seek on (lane, id) even when statistics are young; the filter is repeated
-- word for word, so the filtered index always matches), then locked by id.
-- The seek starts at @from (storage.QueueClaimNextParams.From), a row of the
-- lane that was its head once: nothing below it is unfinished, and the ghost
-- records finished rows leave in the index until cleanup are not walked.
-- DATALENGTH: T-SQL compares strings padded with spaces, so without it the
-- lanes of keys "123" and "123 " would be one.
WHILE @tries < 100
BEGIN
    SET @tries += 1;
    SET @candidate = NULL;
    SELECT TOP (1) @candidate = id
      FROM mf_queue WITH (INDEX(mf_queue_lane_head))
     WHERE lane = @lane AND DATALENGTH(lane) = DATALENGTH(@lane) AND status IN (N'pending', N'inflight') AND id >= @from
     ORDER BY id;
    IF @candidate IS NULL
        BREAK;

    SET @status = NULL;
    SELECT @status = status, @due = next_attempt_at, @lease_expires_at = lease_expires_at, @held = held,
           @destination = destination
      FROM mf_queue WITH (UPDLOCK, HOLDLOCK, ROWLOCK)
     WHERE id = @candidate;
    IF @status IN (N'pending', N'inflight')
    BEGIN
        SET @head = @candidate;
        BREAK;
    END;
END;

-- The lane's outbound held by an operator: nothing of it is claimed (step 3).
-- DATALENGTH: T-SQL compares names padded with spaces.
IF @head IS NOT NULL AND EXISTS (SELECT 1 FROM mf_outbound_holds
                                  WHERE outbound = @destination AND DATALENGTH(outbound) = DATALENGTH(@destination))
    SET @outbound_held = 1;

-- The conditions' clock, read after the head's lock is granted, so that
-- waiting for another claimer does not make it stale. Not the lease's: see
-- THE LEASE below.
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();

-- Step 1: the stranded head goes back to pending.
IF @status = N'inflight' AND @lease_expires_at <= @now
BEGIN
    UPDATE mf_queue
       SET status = N'pending', lease_owner = N'', lease_expires_at = NULL, updated_at = @now
     WHERE id = @head;
    SET @status = N'pending';
END;

-- Step 3: claim the head if it is pending, not held and due, and its
-- outbound is not held.
DECLARE @claimed INT = 0;
IF @status = N'pending' AND @held = 0 AND @due <= @now AND @outbound_held = 0
BEGIN
    UPDATE mf_queue
       SET status = N'inflight',
           lease_owner = @owner,
           attempts = attempts + 1,
           updated_at = @now
     WHERE id = @head;
    SET @claimed = @@ROWCOUNT;
END;

DECLARE @run TABLE (id BIGINT PRIMARY KEY);
IF @claimed = 1
    INSERT INTO @run (id) VALUES (@head);

DECLARE @last BIGINT = @head, @next BIGINT, @taken INT = 1;
WHILE @claimed = 1 AND @taken < @max
BEGIN
    SET @next = NULL;
    SELECT TOP (1) @next = id
      FROM mf_queue WITH (INDEX(mf_queue_lane_head))
     WHERE lane = @lane AND DATALENGTH(lane) = DATALENGTH(@lane) AND status IN (N'pending', N'inflight') AND id > @last
     ORDER BY id;
    IF @next IS NULL
        BREAK;
    SET @status = NULL;
    SELECT @status = status, @due = next_attempt_at, @lease_expires_at = lease_expires_at, @held = held
      FROM mf_queue WITH (UPDLOCK, HOLDLOCK, ROWLOCK)
     WHERE id = @next;
    -- Finished since the index was read (an operator's skip): look again
    -- past it.
    IF @status IS NULL OR @status NOT IN (N'pending', N'inflight')
    BEGIN
        SET @last = @next;
        CONTINUE;
    END;
    IF NOT ((@status = N'pending' AND @held = 0 AND @due <= @now)
            OR (@status = N'inflight' AND @lease_expires_at <= @now))
        BREAK;
    UPDATE mf_queue
       SET status = N'inflight',
           lease_owner = @owner,
           attempts = attempts + 1,
           updated_at = @now
     WHERE id = @next;
    INSERT INTO @run (id) VALUES (@next);
    SET @last = @next;
    SET @taken += 1;
END;

-- The run's lease, counted from a clock read now that every row of it is
-- locked (see THE LEASE): this UPDATE waits for no other transaction.
IF @claimed = 1
BEGIN
    DECLARE @leased DATETIME2(6) = SYSUTCDATETIME();
    -- By primary key only (FORCESEEK): a scan would take update locks on
    -- other lanes' rows and wait for them.
    UPDATE q
       SET lease_expires_at = DATEADD(microsecond, @ttl_us, DATEADD(second, @ttl_s, @leased))
      FROM mf_queue AS q WITH (FORCESEEK, ROWLOCK)
      JOIN @run AS r ON r.id = q.id;
END;

SELECT q.id, q.message_id, q.destination, q.lane, q.status, q.attempts, q.next_attempt_at,
       q.lease_owner, q.lease_expires_at, q.last_error, q.created_at, q.updated_at, q.held,
       m.payload, m.control_id, q.attempts_at_retry
  FROM mf_queue AS q
  JOIN mf_messages AS m ON m.id = q.message_id
 WHERE q.id IN (SELECT id FROM @run)
 ORDER BY q.id;

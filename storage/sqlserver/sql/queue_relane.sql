-- Move one unfinished row to another lane, run for each row of a move in
-- one fenced transaction, by a leader whose lanes are not running. A row
-- finished meanwhile stays where it is. DATALENGTH: T-SQL compares strings
-- padded with spaces, and lanes "x/1" and "x/1 " are two lanes.
SET NOCOUNT ON;
UPDATE mf_queue
   SET lane = @new_lane
 WHERE id = @id
   AND status IN (N'pending', N'inflight')
   AND (lane <> @new_lane OR DATALENGTH(lane) <> DATALENGTH(@new_lane));
SELECT @@ROWCOUNT AS moved;

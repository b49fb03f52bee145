-- Move one unfinished row to another lane (?1 id, ?2 its new lane), run for
-- each row of a move in one fenced transaction, by a leader whose lanes are
-- not running. A row finished meanwhile stays where it is.
UPDATE mf_queue
   SET lane = ?2
 WHERE id = ?1
   AND status IN ('pending', 'inflight')
   AND lane <> ?2

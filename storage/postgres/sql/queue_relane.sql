-- Move unfinished rows to other lanes ($1 ids, $2 their new lanes, index
-- for index). Run in a fenced transaction by a leader whose lanes are not
-- running. A row finished meanwhile stays where it is.
UPDATE mf_queue AS q
   SET lane = m.lane
  FROM unnest($1::bigint[], $2::text[]) AS m (id, lane)
 WHERE q.id = m.id
   AND q.status IN ('pending', 'inflight')
   AND q.lane <> m.lane

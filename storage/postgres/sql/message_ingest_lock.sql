-- Ingest transactions take ids and commit one at a time, so a later queue id
-- never becomes visible before an earlier one (a lane claim could otherwise
-- deliver id 11 while id 10 is still uncommitted). Held until commit.
SELECT pg_advisory_xact_lock(hashtext('mf_ingest'), hashtext(current_schema()))

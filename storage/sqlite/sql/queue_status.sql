-- Why an update of a queue row matched nothing: no row (storage.ErrNotFound),
-- or its status (an operator's action refused: storage.NotPending).
SELECT status FROM mf_queue WHERE id = ?1

SELECT 1 FROM mf_queue WHERE id = ?1

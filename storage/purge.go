package storage

// PurgeChunk is the most rows of each table one transaction of a purge
// deletes (Store.MessagePurge): a call of DefaultPurgeLimit rows in one
// transaction held its locks, on PostgreSQL and SQL Server the fence's
// lock, and on SQLite the one writer (every ingest, and
// its ACK, waited), for the whole call.
const PurgeChunk = 1000

// Purge runs MessagePurge for each dialect, one transaction at a time:
// finished(q, first) deletes at most q finished queue rows and the
// messages they leave with no queue row (first: and the nodes not seen
// since the cut-off), until a call finds fewer than it could take or limit
// queue rows are gone; then, unless limit were, walk(w) walks on over at
// most w messages past the cut-off for those never queued, returning those
// it deleted and those it walked past, until it walks past fewer than it
// could (it reached the cut-off, or the newest message) or limit messages
// were walked past or deleted: then More is set.
func Purge(limit int, finished func(q int64, first bool) (PurgeResult, error), walk func(w int64) (deleted, passed int64, err error)) (PurgeResult, error) {
	var res PurgeResult
	all := int64(limit)
	if all <= 0 {
		all = DefaultPurgeLimit
	}
	for first := true; res.QueueRows < all; first = false {
		q := min(PurgeChunk, all-res.QueueRows)
		r, err := finished(q, first)
		if err != nil {
			return PurgeResult{}, err
		}
		res.QueueRows += r.QueueRows
		res.Messages += r.Messages
		res.Nodes += r.Nodes
		if r.QueueRows < q {
			break
		}
	}
	if res.QueueRows == all {
		return res, nil // a full batch: the caller calls again
	}
	for walked := int64(0); ; {
		w := min(PurgeChunk, all-walked, all-res.Messages)
		if w <= 0 {
			res.More = true
			return res, nil
		}
		deleted, passed, err := walk(w)
		if err != nil {
			return PurgeResult{}, err
		}
		res.Messages += deleted
		walked += passed
		if passed < w {
			return res, nil
		}
	}
}

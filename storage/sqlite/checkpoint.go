package sqlite

import (
	"context"
	"fmt"
	"time"
)

// Checkpoints, off the commit path.
//
// SQLite's automatic checkpoint runs inside the COMMIT that takes the WAL
// past 1,000 pages: that commit copies the WAL's pages into the database
// file and fsyncs it before it returns. Here every write waits for the one
// writer, so every write queued behind such a commit waited for the copy
// too. In a 32-connection run on the development machine, 38 of 4,000
// commits took over 3 ms (the longest 19 ms; the average was 0.6 ms); with
// the checkpoints below, 17 did. So the automatic checkpoint is off
// (wal_autocheckpoint=0 on every connection) and the store checkpoints in
// the background:
//
//  1. every checkpointInterval, a PASSIVE checkpoint without the writer: it
//     copies what the WAL holds while writes go on beside it (a checkpoint
//     never blocks SQLite's readers or its writer);
//  2. once the WAL holds more than walRestartFrames, a PASSIVE checkpoint
//     again, holding the writer: it copies only the pages committed during
//     step 1, so the WAL is then wholly in the database file and the next
//     write starts the WAL from its beginning instead of appending. Without
//     this step a WAL under constant writes is never caught up and grows
//     without end. It holds the writer for one fsync of the database file
//     and a few pages (1.5 to 2.5 ms measured), once per walRestartFrames
//     of writes instead of once per 1,000 pages.
//
// A checkpoint never changes what a reader sees or what survives a crash:
// a committed transaction is durable in the WAL (synchronous=FULL) whether
// or not it has been copied yet.

// checkpointInterval is how often the store checkpoints while it is being
// written to.
const checkpointInterval = 100 * time.Millisecond

// walRestartFrames is the WAL size, in pages, past which a checkpoint also
// takes step 2 (16 MiB with SQLite's 4 KiB pages).
const walRestartFrames = 4096

// checkpointLoop checkpoints every checkpointInterval when something was
// committed since the last checkpoint, until Close. A goroutine, not an
// actor: the store is below the actor system, and the loop has no state
// anyone else reads.
func (s *Store) checkpointLoop() {
	defer close(s.checkpointsDone)
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	last := s.commits.Load()
	failing := false
	for {
		select {
		case <-s.stopCheckpoints:
			return
		case <-t.C:
		}
		n := s.commits.Load()
		if n == last {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*checkpointInterval+s.busyTimeout)
		err := s.checkpoint(ctx)
		cancel()
		switch {
		case err != nil && !failing:
			failing = true
			s.log.Error().Err(err).Str("path", s.path).Dur("retry_every", checkpointInterval).
				Msg("checkpointing the SQLite WAL failed; writes go on, but the -wal file grows until a retry succeeds: check the disk (space, permissions)")
		case err == nil && failing:
			failing = false
			s.log.Info().Str("path", s.path).Msg("checkpointing the SQLite WAL works again")
		}
		if err == nil {
			last = n
		}
	}
}

// checkpoint runs step 1 above, and step 2 when the WAL has grown enough
// and step 1 copied all of it. A read older than the WAL's last pages (mf
// backup's, a long metrics scrape) keeps any checkpoint from copying them:
// step 2 would copy nothing more while it lasts, and once it ended would
// copy everything written meanwhile holding the writer (323 ms for 93,439
// pages after a backup of a 3.65 GiB store). The next rounds' step 1 copies
// that without the writer first.
func (s *Store) checkpoint(ctx context.Context) error {
	frames, done, err := s.walCheckpoint(ctx)
	if err != nil || frames < walRestartFrames || done < frames {
		return err
	}
	select {
	case s.writer <- struct{}{}:
	case <-s.stopCheckpoints:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sqlite checkpoint: waiting for the writer: %w", ctx.Err())
	}
	defer func() { <-s.writer }()
	_, _, err = s.walCheckpoint(ctx)
	return err
}

// walCheckpoint runs one PASSIVE checkpoint and returns the WAL's size in
// pages and how many of them are in the database file now. SQLite reports
// a checkpoint it could not do (another handle's checkpoint in progress) as
// busy, not as an error: the next round does it.
func (s *Store) walCheckpoint(ctx context.Context) (frames, done int64, err error) {
	var busy int64
	if err := s.db.QueryRowContext(ctx, queries.Get("wal_checkpoint")).Scan(&busy, &frames, &done); err != nil {
		return 0, 0, fmt.Errorf("sqlite checkpoint: %w", err)
	}
	return frames, done, nil
}

// walSizeLimit is the size the -wal file is cut back to when the WAL
// restarts (PRAGMA journal_size_limit).
const walSizeLimit = 64 << 20

package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/storage"
)

// A message and its queue rows are read as of one moment, as SQLite reads
// them: a purge that commits between the read of the message and the read
// of its rows left the message without its deliveries, a message routed
// and delivered shown as sent nowhere (GET /messages/{id}). Here the read of
// the rows waits on a lock the purge's session holds, so that the purge
// commits in between.
func TestAMessageIsReadWithItsQueueRowsAsOfOneMoment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openMigrated(t, ctx, 3)
	in, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
		Inbound: "in", Payload: []byte("MSH|^~\\&|x"), Status: storage.MessageRouted,
		Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/1"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Lane: "d/1", Owner: "n", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.QueueComplete(ctx, storage.QueueCompleteParams{Claim: c.Claim()}); err != nil {
		t.Fatal(err)
	}

	purge, pid := openSession(t, ctx, s)
	if _, err := purge.Exec(ctx, "LOCK TABLE mf_queue IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	type read struct {
		d   storage.MessageDetail
		err error
	}
	done := make(chan read, 1)
	go func() {
		d, err := s.MessageRead(ctx, in[0].MessageID)
		done <- read{d, err}
	}()
	waitForBlockedBy(t, ctx, s, pid)
	// The retention purge, every finished row past a cut-off an hour ahead.
	older := storage.Seconds(-time.Hour)
	rows, err := purge.Query(ctx, queries.Get("message_purge_queue"), older, 10)
	if err != nil {
		t.Fatal(err)
	}
	freed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(freed) != 1 {
		t.Fatalf("message_purge_queue: %v, %v; want 1 row", freed, err)
	}
	if tag, err := purge.Exec(ctx, queries.Get("message_purge_freed"), freed, older); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("message_purge_freed: %v, %v; want 1 row", tag, err)
	}
	if err := purge.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	switch {
	case errors.Is(r.err, storage.ErrNotFound):
	case r.err != nil:
		t.Fatalf("message read: %v", r.err)
	case len(r.d.Queue) != 1:
		t.Fatalf("message %d (%s) read with %d queue rows, want its 1 (or none of it: purged)", r.d.Message.ID, r.d.Message.Status, len(r.d.Queue))
	}
}

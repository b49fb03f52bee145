package sqlite

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite/sqlitetest"
)

// A write that finds the disk full fails with storage.ErrFull, saying where
// to free space, and never as a refusal (which the ingest answers AR, the
// message dropped): the sender gets AE and resends. Nothing of it is
// stored, and once space is back the same write works on the same handle.
// A write that shares the failed one's group commit and fits (a delivery's
// record: an update takes no new page) is committed all the same: SQLite
// rolls the whole transaction back on SQLITE_FULL, and failing every write
// of it made each lane whose record met an ingest (senders resend their AE
// messages all the while) send its message again, and again.
func TestAWriteToAFullDiskIsRetriedNotRefused(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	payload := bytes.Repeat([]byte("x"), 8000)
	ingest := func(id string) error {
		_, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
			Inbound: "in", ControlID: id, Payload: payload, Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/" + id}},
		}}})
		return err
	}
	if err := ingest("M1"); err != nil {
		t.Fatal(err)
	}
	claim, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Lane: "d/M1", Owner: "o", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	sqlitetest.LimitPages(t, s.DB(), 0)
	wantFull := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, storage.ErrFull) || errors.Is(err, storage.ErrRefused) ||
			!strings.Contains(err.Error(), "free disk space on the file system of "+s.path) {
			t.Fatalf("%s on a full disk: error %v; want storage.ErrFull, not ErrRefused, saying to free disk space on the file system of %s", what, err, s.path)
		}
	}
	wantFull("an ingest", ingest("F1"))

	// The ingest and a delivery's record in one group commit.
	s.writer <- struct{}{}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); errs[0] = ingest("F2") }()
	waitQueued(t, s, 1)
	go func() {
		defer wg.Done()
		errs[1] = s.QueueComplete(ctx, storage.QueueCompleteParams{Claim: claim.Claim()})
	}()
	waitQueued(t, s, 2)
	<-s.writer
	wg.Wait()
	wantFull("an ingest in a group commit", errs[0])
	if errs[1] != nil {
		t.Fatalf("a delivery recorded in the group commit of an ingest that found the disk full: %v", errs[1])
	}

	sqlitetest.LimitPages(t, s.DB(), 1<<20) // space freed
	if err := ingest("F1"); err != nil {
		t.Fatalf("the ingest once space is back: %v", err)
	}
	var status string
	if err := s.DB().QueryRowContext(ctx, "SELECT status FROM mf_queue WHERE id = ?", claim.Row.ID).Scan(&status); err != nil || status != storage.QueueDone {
		t.Fatalf("the delivered row is %q, %v; want %q", status, err, storage.QueueDone)
	}
	var ids []string
	rows, err := s.DB().QueryContext(ctx, "SELECT control_id FROM mf_messages ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if got := strings.Join(ids, " "); got != "M1 F1" {
		t.Fatalf("messages stored: %s, want M1 F1 (nothing of the writes that found the disk full)", got)
	}
}

package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
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

// A write whose failure takes the whole transaction with it (SQLite rolls
// back on SQLITE_FULL, IOERR, BUSY or NOMEM within a statement; here the
// write ends the transaction itself) fails alone, however many of a batch
// do: the others are committed, once each, and each runs a bounded number
// of times. Re-running all the others after each such failure ran the first
// write of a batch with 10 of them 12 times.
func TestWritesThatEndTheirTransactionFailAloneInBoundedWork(t *testing.T) {
	ctx := context.Background()
	s := openMigrated(t)
	if _, err := s.db.ExecContext(ctx, "CREATE TABLE t_written (n INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	const n = 20
	runs := make([]int, n)
	killed := errors.New("the transaction ended under this write")
	batch := make([]*writeJob, n)
	for i := range batch {
		batch[i] = &writeJob{ctx: ctx, done: make(chan error, 1), fn: func(tx *sql.Tx) error {
			runs[i]++
			if i%2 == 1 { // as SQLite's own rollback on a full disk
				if _, err := tx.ExecContext(ctx, "ROLLBACK"); err != nil {
					t.Errorf("write %d: %v", i, err)
				}
				return killed
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO t_written (n) VALUES (?)", i)
			return err
		}}
	}
	s.writer <- struct{}{}
	s.commit(batch)
	<-s.writer
	for i, j := range batch {
		select {
		case err := <-j.done:
			if want := map[bool]error{true: killed, false: nil}[i%2 == 1]; !errors.Is(err, want) {
				t.Errorf("write %d: %v, want %v", i, err, want)
			}
		default:
			t.Errorf("write %d was told nothing", i)
		}
		if runs[i] > 3 {
			t.Errorf("write %d ran %d times; want at most 3 (the batch's try, its try with savepoints, its part's)", i, runs[i])
		}
	}
	rows, err := s.db.QueryContext(ctx, "SELECT n FROM t_written ORDER BY rowid")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if fmt.Sprint(got) != "[0 2 4 6 8 10 12 14 16 18]" {
		t.Errorf("committed %v; want each write that worked once, in order", got)
	}
}

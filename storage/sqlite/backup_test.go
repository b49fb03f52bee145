package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// A backup taken while another handle writes is the store as of one
// commit: it holds every ingest committed before the backup began, each
// message with its queue row, and is sound. Backups follow one another
// with writes in between, so some are taken while the background
// checkpoint copies pages into the file (a copy of the file alone then
// lost commits, or had indexes that disagreed with their tables).
func TestBackupBesideWritesHoldsEveryEarlierCommit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mf.db")
	writer, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	if err := writer.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	reader, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()

	var committed atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			var msgs []storage.NewMessage
			for j := range 20 {
				msgs = append(msgs, storage.NewMessage{Inbound: "in", ControlID: fmt.Sprint(i, "-", j), MessageType: "ADT^A01",
					Payload: []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|1|P|2.5\r"), Status: storage.MessageRouted,
					Deliveries: []storage.Delivery{{Destination: "out", Lane: fmt.Sprint("out/", j%4)}}})
			}
			if _, err := writer.MessageIngest(ctx, storage.MessageIngestParams{Messages: msgs}); err != nil {
				done <- err
				return
			}
			committed.Add(int64(len(msgs)))
		}
	}()
	dir := t.TempDir()
	for i := range 10 {
		before := committed.Load()
		sum, err := reader.Backup(ctx, filepath.Join(dir, fmt.Sprint(i, ".db")))
		if err != nil {
			close(stop)
			t.Fatalf("backup %d beside writes: %v", i, err)
		}
		if sum.Messages < before || sum.Unfinished != sum.Messages || sum.LastQueueID != sum.Messages {
			t.Errorf("backup %d holds %d messages, %d queue rows to deliver, last queue id %d; want at least the %d committed before it, one row each",
				i, sum.Messages, sum.Unfinished, sum.LastQueueID, before)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A restore never replaces files set aside by an earlier one: two restores
// within one second (a script run twice) named their sets alike, and the
// second one's rename replaced the store the first had set aside, the
// only copy of it.
func TestRestoreKeepsAnEarlierRestoresFilesSetAside(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mf.db")
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "backup.db")
	if _, err := s.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{Inbound: "in", ControlID: "1", MessageType: "ADT^A01",
		Payload: []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|1|P|2.5\r"), Status: storage.MessageRouted}}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	first, err := sqlite.Restore(ctx, path, backup, "STAMP")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Restore(ctx, path, backup, "STAMP"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("a second restore whose set-aside names are taken: %v; want it refused", err)
	}
	old, err := sqlite.Open(ctx, sqlite.Options{Path: first.Aside[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	var n int
	if err := old.DB().QueryRow("SELECT count(*) FROM mf_messages").Scan(&n); err != nil || n != 1 {
		t.Errorf("the store the first restore set aside holds %d messages (%v); want its 1", n, err)
	}
}

// Two backups to one new file at once (a scheduled one and an operator's,
// named by the minute as the README's example names them): one writes the
// file, the other is refused. Both were told they had written it, the
// second having replaced the first's file, while mf backup "never
// overwrites a file".
func TestBackupsToOneFileAtOnceWriteItOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(dir, "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "backup.db")
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := st.Backup(ctx, dest)
			errs <- err
		}()
	}
	var written []string
	var refused int
	for range n {
		if err := <-errs; err == nil {
			written = append(written, "ok")
		} else if strings.Contains(err.Error(), "already exists") {
			refused++
		} else {
			t.Errorf("backup: %v", err)
		}
	}
	if len(written) != 1 || refused != n-1 {
		t.Fatalf("%d backups to one new file at once: %d wrote it, %d refused; want 1 and %d", n, len(written), refused, n-1)
	}
}

package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// A backup to a disk that fills up fails, says the disk is full, and
// leaves nothing in the backup directory: it left its temporary file's
// rollback journal (.backup.db.NNN.tmp-journal), which VACUUM INTO makes
// beside the file it writes.
func TestABackupToAFullDiskLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var msgs []storage.NewMessage
	// About 4 MB: the journal was left once the disk filled past the
	// copy's first megabyte (800 messages and more, in runs of 50 to 3200).
	for i := range 1600 {
		msgs = append(msgs, storage.NewMessage{Inbound: "in", ControlID: fmt.Sprint(i), MessageType: "ADT^A01",
			Payload: []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|1|P|2.5\r" + strings.Repeat("OBX|1|TX|||x\r", 200)), Status: storage.MessageRouted})
	}
	if _, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	dir := smallTmpfs(t)
	_, err = s.Backup(ctx, filepath.Join(dir, "backup.db"))
	if err == nil || !strings.Contains(err.Error(), "full") {
		t.Fatalf("a backup larger than its disk: %v; want it to fail, saying the disk is full", err)
	}
	left, _ := os.ReadDir(dir)
	for _, e := range left {
		t.Errorf("a failed backup left %s in its directory", e.Name())
	}
}

package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// ingest stores n routed messages, one queue row each, in the SQLite store
// at db (opened beside whatever else has it open, as a test may).
func ingest(t *testing.T, db string, n int) {
	t.Helper()
	st := openSQLite(t, db)
	defer st.Close()
	var msgs []storage.NewMessage
	for i := range n {
		msgs = append(msgs, storage.NewMessage{Inbound: "in", ControlID: fmt.Sprint(i), MessageType: "ADT^A01",
			Payload: []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|" + fmt.Sprint(i) + "|P|2.5\r"), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "out", Lane: "out/1"}}})
	}
	if _, err := st.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
}

func openSQLite(t *testing.T, db string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		st.Close()
		t.Fatal(err)
	}
	return st
}

// messages counts the messages of the SQLite store at db and checks it is
// sound.
func messages(t *testing.T, db string) int {
	t.Helper()
	st := openSQLite(t, db)
	defer st.Close()
	var check string
	var n int
	if err := st.DB().QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("%s: integrity_check %q, %v", db, check, err)
	}
	if err := st.DB().QueryRow("SELECT count(*) FROM mf_messages").Scan(&n); err != nil {
		t.Fatalf("%s: %v", db, err)
	}
	return n
}

// crashed leaves the SQLite store at db as a kill -9 of its engine does:
// its last commits only in db-wal (a store closed cleanly checkpoints them
// and removes the WAL).
func crashed(t *testing.T, db string, n int) {
	t.Helper()
	st := openSQLite(t, db)
	var msgs []storage.NewMessage
	for i := range n {
		msgs = append(msgs, storage.NewMessage{Inbound: "in", ControlID: fmt.Sprint("late", i), MessageType: "ADT^A01",
			Payload: []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|late|P|2.5\r"), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "out", Lane: "out/1"}}})
	}
	if _, err := st.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	// Nothing writes after the ingest, so the WAL is not started over:
	// the file, then its WAL, copied one after the other, are the store.
	saved := t.TempDir()
	for _, suffix := range []string{"", "-wal"} {
		copyFile(t, db+suffix, filepath.Join(saved, "f"+suffix))
	}
	st.Close()
	for _, suffix := range []string{"", "-wal"} {
		copyFile(t, filepath.Join(saved, "f"+suffix), db+suffix)
	}
	if _, err := os.Stat(db + "-wal"); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// mf restore puts a backup in place of the store and moves the store it
// replaces aside whole, its WAL with it. A backup copied over mf.db by
// hand after a crash met the crashed store's mf.db-wal, which SQLite then
// applied to it: the engine logged "database disk image is malformed" at
// every write.
func TestRestoreMovesTheOldStoreAsideWithItsWAL(t *testing.T) {
	path := writeConfig(t)
	dir := filepath.Dir(path)
	db := filepath.Join(dir, "mf.db")
	ingest(t, db, 3)
	backup := filepath.Join(t.TempDir(), "backup.db")
	if out, err := runMF(t, "backup", "--config", path, "--to", backup); err != nil {
		t.Fatalf("mf backup: %v\n%s", err, out)
	}
	crashed(t, db, 40)

	out, err := runMF(t, "restore", "--config", path, "--from", backup)
	if err != nil || !strings.Contains(out, "3 messages") {
		t.Fatalf("mf restore: %v, printed %q; want it done, saying the store holds 3 messages", err, out)
	}
	if n := messages(t, db); n != 3 {
		t.Errorf("the restored store holds %d messages; want the backup's 3", n)
	}
	aside, _ := filepath.Glob(db + ".before-restore-*")
	var old string
	for _, f := range aside {
		if !strings.HasSuffix(f, "-wal") && !strings.HasSuffix(f, "-shm") {
			old = f
		}
	}
	if old == "" || !strings.Contains(out, old) {
		t.Fatalf("files set aside %v, mf restore printed %q; want the replaced store moved aside and named", aside, out)
	}
	if n := messages(t, old); n != 43 {
		t.Errorf("the store set aside holds %d messages; want 43, its WAL's included", n)
	}
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the restored store's mode is %v; want 0600", fi.Mode().Perm())
	}
}

// mf restore refuses, and changes nothing, while an engine runs on the
// store, for a --from that is not a backup of an mf store, and for a
// database server's store.
func TestRestoreRefuses(t *testing.T) {
	path := writeConfig(t)
	db := filepath.Join(filepath.Dir(path), "mf.db")
	ingest(t, db, 2)
	backup := filepath.Join(t.TempDir(), "backup.db")
	if out, err := runMF(t, "backup", "--config", path, "--to", backup); err != nil {
		t.Fatalf("mf backup: %v\n%s", err, out)
	}
	ingest(t, db, 1)

	engine, err := sqlite.Open(context.Background(), sqlite.Options{Path: db, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := runMF(t, "restore", "--config", path, "--from", backup)
	engine.Close()
	if err == nil || !strings.Contains(err.Error(), "in use by another mf process") {
		t.Errorf("mf restore beside a running engine: %v, printed %q; want it refused as in use", err, out)
	}

	notMf := filepath.Join(t.TempDir(), "notes.db")
	if err := os.WriteFile(notMf, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runMF(t, "restore", "--config", path, "--from", notMf); err == nil {
		t.Errorf("mf restore from a file that is not a backup: done, printed %q; want it refused", out)
	}
	if out, err := runMF(t, "restore", "--config", path); err == nil || !strings.Contains(err.Error(), "--from") {
		t.Errorf("mf restore without --from: %v, printed %q; want it to ask for --from", err, out)
	}
	if n := messages(t, db); n != 3 {
		t.Errorf("after refused restores the store holds %d messages; want its 3, untouched", n)
	}
	if aside, _ := filepath.Glob(db + ".before-restore-*"); len(aside) > 0 {
		t.Errorf("refused restores moved %v aside", aside)
	}

	pg := filepath.Join(t.TempDir(), "pg.toml")
	if err := os.WriteFile(pg, []byte(fmt.Sprintf("[store]\nbackend = \"postgres\"\nurl = %q\n", pgtest.NewSchema(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runMF(t, "restore", "--config", pg, "--from", backup); err == nil || !strings.Contains(err.Error(), "pg_restore") {
		t.Errorf("mf restore onto a PostgreSQL store: %v, printed %q; want it refused, naming pg_restore", err, out)
	}
}

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// backupEngineConfig is a single node on the SQLite file db that takes
// MLLP on in and delivers it, in lanes by PID-3.1 (mf bench's lane), to
// the MLLP partner at partner.
func backupEngineConfig(t *testing.T, dir, db, in, partner string) string {
	t.Helper()
	path := filepath.Join(dir, "mf.toml")
	cfg := fmt.Sprintf(`[store]
path = %q
[api]
listen = %q
[[inbound]]
name = "in"
type = "mllp"
listen = %q
[[outbound]]
name = "partner"
type = "mllp"
address = %q
retry_base_seconds = 1
retry_max_seconds = 1
[[route]]
from = "in"
to = ["partner"]
lane_key = "PID-3.1"
`, db, enginetest.FreeAddr(t), in, partner)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mf backup copies the SQLite store of a running engine into one file
// that mf run starts on: the messages the engine has accepted and not yet
// delivered (its partner is down) are in it, and an engine started on the
// copy delivers each of them once, in lane order. Copying mf.db alone
// while the engine runs lost acknowledged messages (those still only in
// mf.db-wal) and could give a file whose indexes disagree with its tables.
func TestBackupOfARunningEngineHoldsItsQueue(t *testing.T) {
	const n = 60
	dir := t.TempDir()
	in := enginetest.FreeAddr(t)
	path := backupEngineConfig(t, dir, filepath.Join(dir, "mf.db"), in, enginetest.FreeAddr(t)) // a partner that is down
	logs := runInProcess(t, path)
	enginetest.WaitFor(t, "the engine to listen", 30*time.Second, func() bool { return strings.Contains(logs.String(), "MLLP listener open") })
	if rep, err := bench(t, benchOptions{Target: in, Connections: 4, Count: n, Timeout: 10 * time.Second}); err != nil || rep.Accepted != n {
		t.Fatalf("sending %d messages: %v, %+v", n, err, rep)
	}

	to := filepath.Join(t.TempDir(), "backup.db")
	out, err := runMF(t, "backup", "--config", path, "--to", to)
	if err != nil || !strings.Contains(out, to) {
		t.Fatalf("mf backup beside a running engine: %v, printed %q; want it to name %s", err, out, to)
	}
	fi, err := os.Stat(to)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the backup's mode is %v; want 0600: it holds every message (PHI)", fi.Mode().Perm())
	}
	if out, err := runMF(t, "backup", "--config", path, "--to", to); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("mf backup onto an existing file: %v, printed %q; want it refused, the file left as it is", err, out)
	}

	sink := startSink(t, n)
	dir2 := t.TempDir()
	in2 := enginetest.FreeAddr(t)
	runInProcess(t, backupEngineConfig(t, dir2, to, in2, sink.addr))
	rep := sink.report(t)
	if rep.Unique != n || rep.Duplicates != 0 || rep.Reordered != 0 || rep.Malformed != 0 {
		t.Fatalf("an engine started on the backup delivered %+v; want all %d messages once, in lane order", rep, n)
	}
}

// mf backup of a store path where there is no file creates none: a
// backup from the wrong directory must not leave an empty mf.db behind
// and report success.
func TestBackupOfAMissingStoreCreatesNothing(t *testing.T) {
	path := writeConfig(t)
	to := filepath.Join(t.TempDir(), "backup.db")
	out, err := runMF(t, "backup", "--config", path, "--to", to)
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("mf backup of a store that does not exist: %v, printed %q; want it refused", err, out)
	}
	for _, f := range []string{filepath.Join(filepath.Dir(path), "mf.db"), to} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("mf backup of a missing store created %s", f)
		}
	}
}

// mf backup refuses a PostgreSQL store and names the database's own tool:
// a copy of one node's view is not a backup of a database other nodes
// write to.
func TestBackupOfAPostgreSQLStoreNamesPgDump(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mf.toml")
	cfg := fmt.Sprintf("[store]\nbackend = \"postgres\"\nurl = %q\n", pgtest.NewSchema(t))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(dir, "backup.db")
	out, err := runMF(t, "backup", "--config", path, "--to", to)
	if err == nil || !strings.Contains(err.Error(), "pg_dump") {
		t.Fatalf("mf backup of a PostgreSQL store: %v, printed %q; want it refused, naming pg_dump", err, out)
	}
	if _, err := os.Stat(to); err == nil {
		t.Errorf("mf backup of a PostgreSQL store created %s", to)
	}
}

// --to is required and never the store itself.
func TestBackupNeedsATargetOtherThanTheStore(t *testing.T) {
	path := writeConfig(t)
	if out, err := runMF(t, "migrate", "--config", path); err != nil {
		t.Fatalf("mf migrate: %v\n%s", err, out)
	}
	if out, err := runMF(t, "backup", "--config", path); err == nil || !strings.Contains(err.Error(), "--to") {
		t.Errorf("mf backup without --to: %v, printed %q; want it to ask for --to", err, out)
	}
	db := filepath.Join(filepath.Dir(path), "mf.db")
	if out, err := runMF(t, "backup", "--config", path, "--to", db); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("mf backup onto the store itself: %v, printed %q; want it refused", err, out)
	}
}

// Without a config file mf backup copies ./mf.db, the store mf run would
// use there, and says so once: it printed "(config (built-in default
// config))".
func TestBackupWithoutAConfigNamesTheBuiltInConfig(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("MF_CONFIG", "")
	os.Unsetenv("MF_CONFIG")
	ingest(t, filepath.Join(dir, "mf.db"), 1)
	out, err := runMF(t, "backup", "--to", "backup.db")
	if err != nil || !strings.Contains(out, "sqlite store mf.db (built-in default config) backed up to backup.db: 1 messages") {
		t.Fatalf("mf backup without a config: %v, printed %q; want it to name ./mf.db and the built-in default config", err, out)
	}
}

package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A clustered node reads its file before the shared config version (the
// file names the database). If the version is bumped in between, for a
// file edited meanwhile (the node waited for its database, as after a
// power cut, while an operator ran mf reload from another node), the node
// took the new version for the one its file was read at: it ran the old
// file, never reloaded, and reported the new version in mf_nodes and
// /cluster/status.
func TestANodeRunsTheFileOfTheConfigVersionItStartsAt(t *testing.T) {
	url := pgtest.NewSchema(t)
	admin, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy := enginetest.StartProxy(t, enginetest.HostOf(t, url))
	proxy.Cut() // the database does not answer the node yet
	before, after, api := enginetest.FreeAddr(t), enginetest.FreeAddr(t), enginetest.FreeAddr(t)
	dir := t.TempDir()
	file := func(listen string) []byte {
		return []byte("[store]\nbackend = \"postgres\"\npool_size = 3\nurl = \"" + proxy.Via(t, url) + "\"\n" +
			"[cluster]\nenabled = true\nheartbeat_seconds = 0.2\nleader_fence_timeout_seconds = 0.5\nleader_lease_ttl_seconds = 1\nnode_timeout_seconds = 1\n" +
			"[api]\nlisten = \"" + api + "\"\n" +
			"[[inbound]]\nname = \"adt_in\"\ntype = \"mllp\"\nlisten = \"" + listen + "\"\n" +
			"[[outbound]]\nname = \"out\"\ntype = \"file\"\ndirectory = \"" + filepath.Join(dir, "out") + "\"\n" +
			"[[route]]\nfrom = \"adt_in\"\nto = [\"out\"]\n")
	}
	path := filepath.Join(dir, "mf.toml")
	if err := os.WriteFile(path, file(before), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := runInProcess(t, path)
	enginetest.WaitFor(t, "the node to wait for its database", 30*time.Second, func() bool {
		return strings.Contains(logs.String(), "cannot reach the database at start")
	})

	// The file is deployed and mf reload run elsewhere, meanwhile.
	if err := os.WriteFile(path, file(after), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ConfigVersionBump(context.Background(), storage.ConfigVersionBumpParams{}); err != nil {
		t.Fatal(err)
	}
	proxy.Restore(t)

	enginetest.WaitFor(t, "the node to lead and open the port of the file as it is now", 30*time.Second, func() bool { return dialable(after) })
	if dialable(before) {
		t.Fatal("the node also opened the port of the file as it was before the bump")
	}
}

// runInProcess runs mf run on the config file at path in this process until
// the test ends, and returns its log (shown if the test failed).
func runInProcess(t *testing.T, path string) *enginetest.LogBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &enginetest.LogBuffer{}
	go func() { done <- App(io.Discard, logs).RunContext(ctx, []string{"mf", "run", "--config", path}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("mf run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("mf run did not stop within 30s of its cancellation")
		}
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	return logs
}

// mf reload on a cluster none of whose nodes runs (stopped for maintenance,
// the file deployed meanwhile) sets the version, which each node reads at
// its start, and says so: it printed "every live node runs config version
// 1: " with an empty list, as if nodes had taken it.
func TestReloadWithNoNodeRunningSaysSo(t *testing.T) {
	path, _ := clusterFile(t)
	if out, err := runMF(t, "migrate", "--config", path); err != nil {
		t.Fatalf("mf migrate: %v\n%s", err, out)
	}
	out, err := runMF(t, "reload", "--config", path)
	if err != nil || !strings.Contains(out, "no node runs: each reads config version 1 at its start") {
		t.Fatalf("mf reload with no node running: error %v, printed %q; want it to say that no node runs", err, out)
	}
}

// mf reload of a newer mf on a database its migrations have not reached yet
// (a rolling upgrade: the new binary installed, mf migrate not run) cannot
// read which nodes run the new version (mf_nodes lacks config_fingerprint).
// It set the version, then failed on PostgreSQL's "column does not exist",
// exit 1, as if the reload had not been made. It is refused before the
// bump, saying what to do.
func TestReloadOnAnOlderSchemaSaysToMigrateFirst(t *testing.T) {
	path, url := clusterFile(t)
	if out, err := runMF(t, "migrate", "--config", path); err != nil {
		t.Fatalf("mf migrate: %v\n%s", err, out)
	}
	beforeMigration10(t, url)
	st, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	readVersion := func() int64 {
		t.Helper()
		v, err := st.ConfigVersionRead(context.Background(), storage.ConfigVersionReadParams{})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := readVersion()
	out, err := runMF(t, "reload", "--config", path)
	after := readVersion()
	st.Close()
	if err == nil || !strings.Contains(err.Error(), "mf migrate") || !strings.Contains(err.Error(), "--wait 0") || after != before {
		t.Fatalf("mf reload on a schema without migration 10: error %v, printed %q, config version %d -> %d; want it refused before the bump, saying to run mf migrate or mf reload --wait 0", err, out, before, after)
	}
	// --wait 0 does not read mf_nodes: the bump alone, as before the wait.
	if out, err := runMF(t, "reload", "--config", path, "--wait", "0"); err != nil || !strings.Contains(out, "config version") {
		t.Fatalf("mf reload --wait 0 on the older schema: %v\n%s", err, out)
	}
}

// mf migrate says what it applied: an operator upgrading a cluster learns
// whether the schema moved. It printed "postgres store migrated (…)"
// whatever it did, and mf run logged nothing of it.
func TestMigrateSaysWhatItApplied(t *testing.T) {
	path, url := clusterFile(t)
	for _, want := range []string{"schema created or brought up to date", "nothing to apply"} {
		if out, err := runMF(t, "migrate", "--config", path); err != nil || !strings.Contains(out, want) {
			t.Fatalf("mf migrate: %v, printed %q; want it to say %q", err, out, want)
		}
	}
	beforeMigration10(t, url)
	if out, err := runMF(t, "migrate", "--config", path); err != nil || !strings.Contains(out, "applied migration [10]") {
		t.Fatalf("mf migrate of a schema without migration 10: %v, printed %q; want it to say it applied [10]", err, out)
	}
}

// clusterFile writes a clustered config on a PostgreSQL schema of its own,
// and returns its path and the schema's URL.
func clusterFile(t *testing.T) (path, url string) {
	t.Helper()
	url = pgtest.NewSchema(t)
	path = filepath.Join(t.TempDir(), "mf.toml")
	cfg := "[store]\nbackend = \"postgres\"\npool_size = 2\nurl = \"" + url + "\"\n[cluster]\nenabled = true\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, url
}

// beforeMigration10 takes the migrated schema at url back to what the
// release before migration 0010 (mf_nodes.config_fingerprint) left.
func beforeMigration10(t *testing.T, url string) {
	t.Helper()
	st, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Pool().Exec(context.Background(), "ALTER TABLE mf_nodes DROP COLUMN config_fingerprint; DELETE FROM mf_schema_migrations WHERE version = 10"); err != nil {
		t.Fatal(err)
	}
}

// mf reload is bounded by its store calls' timeout, not by a lock held on
// mf_config (a maintenance, an operator's open session): it waited, silent,
// for as long as the lock, whatever its --wait, then reported success.
func TestReloadGivesUpOnALockedConfigTable(t *testing.T) {
	path, url := clusterFile(t)
	if out, err := runMF(t, "migrate", "--config", path); err != nil {
		t.Fatalf("mf migrate: %v\n%s", err, out)
	}
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	for _, q := range []string{"BEGIN", "LOCK TABLE mf_config IN ACCESS EXCLUSIVE MODE"} {
		if _, err := holder.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer func(d time.Duration) { reloadStoreTimeout = d }(reloadStoreTimeout)
	reloadStoreTimeout = time.Second
	done := make(chan error, 1)
	go func() {
		_, err := runMF(t, "reload", "--config", path, "--wait", "1s")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "did not set the config version within 1s") || !strings.Contains(err.Error(), "run mf reload again") {
			t.Fatalf("mf reload with mf_config locked: %v; want it to give up, saying to run it again", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("mf reload still waits on a locked mf_config after 30 s")
	}
}

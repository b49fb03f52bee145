package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// runMF runs the mf command with args and returns what it printed and its
// error.
func runMF(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := App(&out, &out).Run(append([]string{"mf"}, args...))
	return out.String(), err
}

// writeConfig writes a single-node config whose store is a SQLite file in
// a fresh directory and returns its path.
func writeConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "mf.toml")
	// The API on a port of its own: on the default, 127.0.0.1:8765, an mf
	// run elsewhere on the machine (a quick start beside the tests) made
	// mf run fail on it before the step the test looks at.
	cfg := "[store]\npath = \"" + filepath.Join(dir, "mf.db") + "\"\n[api]\nlisten = \"" + enginetest.FreeAddr(t) + "\"\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mf reload of a single-node config fails and says to restart: no single
// node watches the shared config version, so the bump it made before
// reported success and changed nothing.
func TestReloadRefusedForASingleNode(t *testing.T) {
	path := writeConfig(t)
	if out, err := runMF(t, "migrate", "--config", path); err != nil {
		t.Fatalf("mf migrate: %v\n%s", err, out)
	}
	out, err := runMF(t, "reload", "--config", path)
	if err == nil || !strings.Contains(err.Error(), api.ErrSingleNodeReload.Error()) || !strings.Contains(err.Error(), path) {
		t.Fatalf("mf reload of a single-node config: error %v, printed %q; want the config named and %q", err, out, api.ErrSingleNodeReload)
	}
}

// Without --config, MF_CONFIG or ./mf.toml, mf reload and mf migrate name
// what is missing and create nothing: they used to fall back to the
// built-in default, create ./mf.db and fail with "no such table:
// mf_config" (reload), or report a stray empty store migrated (migrate).
// An existing ./mf.db, the one mf run uses here, may still be migrated.
func TestReloadAndMigrateWithoutAConfigCreateNothing(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("MF_CONFIG", "")
	os.Unsetenv("MF_CONFIG")
	for _, cmd := range []string{"reload", "migrate"} {
		out, err := runMF(t, cmd)
		if err == nil || !strings.Contains(err.Error(), "no config file") || !strings.Contains(err.Error(), "--config") {
			t.Errorf("mf %s without a config: error %v, printed %q; want one naming the missing config", cmd, err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "mf.db")); err == nil {
			t.Fatalf("mf %s without a config created ./mf.db", cmd)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "mf.db"), nil, 0o600); err != nil { // an empty file is an empty SQLite database
		t.Fatal(err)
	}
	if out, err := runMF(t, "migrate"); err != nil || !strings.Contains(out, "mf.db") {
		t.Fatalf("mf migrate of an existing ./mf.db: %v, printed %q", err, out)
	}
}

// mf migrate of a SQLite store an engine runs on is refused as in use: it
// opened the file beside the engine, so that a newer mf's migrate changed
// the schema under an older mf run, which went on with statements written
// for the old one.
func TestMigrateRefusesASQLiteStoreAnEngineRunsOn(t *testing.T) {
	dir := t.TempDir()
	path, db := filepath.Join(dir, "mf.toml"), filepath.Join(dir, "mf.db")
	cfg := fmt.Sprintf("[store]\npath = %q\n[api]\nlisten = %q\n", db, enginetest.FreeAddr(t))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := runInProcess(t, path)
	// The engine writes its pid into the lock file once it holds the lock;
	// it is waited for until it runs, since a stop while it still opens
	// its store (at the test's end) is an error of its own.
	enginetest.WaitFor(t, "the engine to lock its store and run", 30*time.Second, func() bool {
		b, _ := os.ReadFile(db + ".lock")
		return strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) && strings.Contains(logs.String(), "graph started")
	})
	out, err := runMF(t, "migrate", "--config", path)
	if err == nil || !strings.Contains(err.Error(), "in use by another mf process") {
		t.Fatalf("mf migrate beside a running engine: error %v, printed %q; want it refused as in use", err, out)
	}
}

// mf run migrates within migrateTimeout; a migration that takes longer (a
// large SQLite store's table rebuild, a PostgreSQL schema lock held by
// another session) is rolled back, and the error says how to finish it:
// mf migrate, which has no time limit. It said only "context deadline
// exceeded", at every start.
func TestRunSaysHowToFinishAMigrationThatTimesOut(t *testing.T) {
	path := writeConfig(t)
	defer func(d time.Duration) { migrateTimeout = d }(migrateTimeout)
	migrateTimeout = time.Nanosecond
	_, err := runMF(t, "run", "--config", path)
	if err == nil || !strings.Contains(err.Error(), "mf migrate --config "+path) {
		t.Fatalf("mf run whose migration timed out: %v; want an error naming mf migrate --config %s", err, path)
	}
}

// A --drain-timeout of zero or less is refused at start. The engine took it
// for its default (30s), while mf run gave the whole stop the flag plus 30s:
// with a delivery in hand, the stop then ran out before the leader resigned
// its lease, and mf run exited 1 with "engine stop: future: timeout".
func TestRunRefusesADrainTimeoutThatIsNotPositive(t *testing.T) {
	path := writeConfig(t)
	// Should the flag be taken, the run ends at once on its migration
	// instead of running until a signal.
	defer func(d time.Duration) { migrateTimeout = d }(migrateTimeout)
	migrateTimeout = time.Nanosecond
	for _, d := range []string{"0", "-1s"} {
		_, err := runMF(t, "run", "--config", path, "--drain-timeout", d)
		if err == nil || !strings.Contains(err.Error(), "--drain-timeout") {
			t.Errorf("mf run --drain-timeout %s: %v; want an error naming --drain-timeout", d, err)
		}
	}
}

// The store's pool_size reaches the SQLite store: it was not passed, and
// every SQLite store had 5 connections whatever the file said.
func TestTheSQLiteStoreHasTheConfiguredPool(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse([]byte("[store]\npath = \""+filepath.Join(dir, "mf.db")+"\"\npool_size = 3\n"), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(context.Background(), cfg, false, "mf test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n := st.(*sqlite.Store).DB().Stats().MaxOpenConnections; n != 3 {
		t.Fatalf("the SQLite store has %d connections at most; want pool_size = 3", n)
	}
}

// mf check refuses a PostgreSQL url that sets pool_max_conns, as mf run
// does when it opens the store: a config that passes mf check in a deploy
// pipeline and then fails at start is what mf check is there to prevent.
// Nothing connects: the database named does not exist.
func TestCheckRefusesAPoolSizeInTheStoreURL(t *testing.T) {
	for _, u := range []string{
		"postgres://mf@db.invalid:5432/mf?pool_max_conns=20",
		"host=db.invalid user=mf dbname=mf pool_max_conns=20",
	} {
		out, err := checkStoreURL(t, "postgres", u)
		if err == nil || !strings.Contains(err.Error(), "pool_max_conns") || !strings.Contains(err.Error(), "pool_size") || !strings.Contains(err.Error(), "mf.toml") {
			t.Errorf("mf check of a url with pool_max_conns (%s): error %v, printed %q; want it refused, naming pool_max_conns, pool_size and the file", u, err, out)
		}
	}
}

// checkStoreURL runs mf check on a config of a store of backend at url,
// with an inbound routed to an outbound (so that the only warnings are the
// store's).
func checkStoreURL(t *testing.T, backend, url string) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mf.toml")
	graph := "[[inbound]]\nname = \"in\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:2575\"\n" +
		"[[outbound]]\nname = \"out\"\ntype = \"file\"\ndirectory = \"" + t.TempDir() + "\"\n" +
		"[[route]]\nfrom = \"in\"\nto = [\"out\"]\n"
	if err := os.WriteFile(path, []byte("[store]\nbackend = \""+backend+"\"\nurl = \""+url+"\"\n"+graph), 0o600); err != nil {
		t.Fatal(err)
	}
	return runMF(t, "check", "--config", path)
}

// mf check refuses a SQL Server store url that mf run refuses when it opens
// the store (a setting go-mssqldb cannot parse), and warns of one that lets
// connections go unencrypted, as mf run does at WARN: it said ok to both.
func TestCheckSaysWhatRunWouldOfASQLServerURL(t *testing.T) {
	check := func(u string) (string, error) { t.Helper(); return checkStoreURL(t, "sqlserver", u) }
	for _, c := range []struct{ url, says string }{
		{"sqlserver://mf@db.invalid?database=mf&encrypt=maybe", "invalid encrypt 'maybe'"},
		{"sqlserver://mf@db.invalid?database=mf&connection+timeout=abc", "invalid connection timeout 'abc'"},
	} {
		if out, err := check(c.url); err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "store.url") {
			t.Errorf("mf check of %s: error %v, printed %q; want it refused naming store.url and saying %q", c.url, err, out, c.says)
		}
	}
	out, err := check("sqlserver://mf@db.invalid?database=mf&encrypt=disable")
	if err != nil || !strings.Contains(out, "warning: ") || !strings.Contains(out, "db.invalid") || !strings.Contains(out, "encrypt") {
		t.Errorf("mf check of a url with encrypt=disable: error %v, printed %q; want ok and a warning naming the host and encrypt", err, out)
	}
	if out, err := check("sqlserver://mf@db.invalid?database=mf&encrypt=strict"); err != nil || strings.Contains(out, "warning: ") {
		t.Errorf("mf check of a url with encrypt=strict: error %v, printed %q; want ok, no warning", err, out)
	}
}

// mf check warns of a PostgreSQL store url that lets connections to another
// host go unencrypted, as mf run does at WARN: it printed no warning.
func TestCheckWarnsOfAPostgreSQLURLWithoutTLS(t *testing.T) {
	check := func(u string) (string, error) { t.Helper(); return checkStoreURL(t, "postgres", u) }
	out, err := check("postgres://mf@db.invalid:5432/mf?sslmode=prefer")
	if err != nil || !strings.Contains(out, "warning: ") || !strings.Contains(out, "db.invalid") || !strings.Contains(out, "sslmode") {
		t.Errorf("mf check of a url with sslmode=prefer: error %v, printed %q; want ok and a warning naming the host and sslmode", err, out)
	}
	if out, err := check("postgres://mf@db.invalid:5432/mf?sslmode=verify-full"); err != nil || strings.Contains(out, "warning: ") {
		t.Errorf("mf check of a url with sslmode=verify-full: error %v, printed %q; want ok, no warning", err, out)
	}
}

// --log-level takes the four levels the README and its own error name, in
// any case; zerolog's others are refused: "disabled", "panic" or "fatal"
// would drop the ERROR lines an operator is told to watch, and "trace"
// is no level mf logs at.
func TestLogLevelIsOneOfFour(t *testing.T) {
	for _, level := range []string{"debug", "info", "warn", "error", "WARN"} {
		if _, err := runMF(t, "--log-level", level, "run", "--config", "/nonexistent/mf.toml"); err == nil || strings.Contains(err.Error(), "--log-level") {
			t.Errorf("--log-level %s: %v; want it taken (and the missing config refused)", level, err)
		}
	}
	for _, level := range []string{"trace", "fatal", "panic", "disabled", "warning", ""} {
		if _, err := runMF(t, "--log-level", level, "run", "--config", "/nonexistent/mf.toml"); err == nil || !strings.Contains(err.Error(), "want debug, info, warn or error") {
			t.Errorf("--log-level %q: %v; want it refused", level, err)
		}
	}
}

// mf check refuses what mf run would refuse of its log settings (an
// MF_LOG_FORMAT or MF_LOG_LEVEL in the service's environment, a flag): it
// said ok, and the node then would not start.
func TestCheckRefusesTheLogSettingsRunRefuses(t *testing.T) {
	path := writeConfig(t)
	if out, err := runMF(t, "--log-format", "xml", "check", "--config", path); err == nil || !strings.Contains(err.Error(), `--log-format "xml"`) {
		t.Errorf("mf --log-format xml check: error %v, printed %q; want the format refused", err, out)
	}
	t.Setenv("MF_LOG_LEVEL", "verbose")
	if out, err := runMF(t, "check", "--config", path); err == nil || !strings.Contains(err.Error(), `--log-level "verbose"`) {
		t.Errorf("MF_LOG_LEVEL=verbose mf check: error %v, printed %q; want the level refused", err, out)
	}
}

// A config file given as an argument, not with --config, is refused: mf
// check checked the built-in default and said ok, mf run ran it (binding
// the default ports and creating ./mf.db), mf migrate migrated ./mf.db.
func TestAConfigFileGivenAsAnArgumentIsRefused(t *testing.T) {
	path := writeConfig(t)
	for _, cmd := range []string{"check", "run", "migrate", "reload"} {
		out, err := runMF(t, cmd, path)
		if err == nil || !strings.Contains(err.Error(), "--config "+path) {
			t.Errorf("mf %s %s: %v, printed %q; want it refused, saying --config %s", cmd, path, err, out, path)
		}
	}
}

// A log flag given on the command line beats its environment variable,
// before the command or after it: run's own copy of the flags read the
// variable too and, being the innermost, won over a flag given before run.
func TestALogFlagBeatsItsEnvironmentVariable(t *testing.T) {
	t.Setenv("MF_LOG_LEVEL", "bogus")
	for _, args := range [][]string{
		{"--log-level", "info", "run", "--config", "/nonexistent/mf.toml"},
		{"run", "--log-level", "info", "--config", "/nonexistent/mf.toml"},
	} {
		if _, err := runMF(t, args...); err == nil || strings.Contains(err.Error(), "--log-level") {
			t.Errorf("MF_LOG_LEVEL=bogus mf %s: %v; want the flag's info taken (and the missing config refused)", strings.Join(args, " "), err)
		}
	}
	if _, err := runMF(t, "run", "--config", "/nonexistent/mf.toml"); err == nil || !strings.Contains(err.Error(), `--log-level "bogus"`) {
		t.Errorf("MF_LOG_LEVEL=bogus mf run: %v; want the variable taken, and refused", err)
	}
}

// The environment variables the README names for the flags: MF_CONFIG for
// --config, MF_LOG_FORMAT and MF_LOG_LEVEL for the log flags, MF_API for
// mf status and mf nodes.
func TestFlagsFromTheEnvironment(t *testing.T) {
	path := writeConfig(t)
	t.Setenv("MF_CONFIG", path)
	if out, err := runMF(t, "check"); err != nil || !strings.HasPrefix(out, path+": ok") {
		t.Errorf("mf check with MF_CONFIG=%s: %v, printed %q; want that file checked", path, err, out)
	}
	for _, env := range []string{"MF_LOG_FORMAT", "MF_LOG_LEVEL"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "bogus")
			flag := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "MF_")), "_", "-")
			// mf migrate, which ends either way: mf run would run on.
			if _, err := runMF(t, "migrate"); err == nil || !strings.Contains(err.Error(), flag+` "bogus"`) {
				t.Errorf("mf migrate with %s=bogus: %v; want %s refused", env, err, flag)
			}
		})
	}
	base := "http://" + enginetest.FreeAddr(t)
	t.Setenv("MF_API", base)
	for _, cmd := range []string{"status", "nodes"} {
		if _, err := runMF(t, cmd); err == nil || !strings.Contains(err.Error(), base) {
			t.Errorf("mf %s with MF_API=%s: %v; want that API asked", cmd, base, err)
		}
	}
}

// A SQLite store that cannot be opened is named by its key and path:
// SQLite's "unable to open database file (14)" named neither.
func TestASQLiteStoreThatCannotBeOpenedIsNamed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mf.toml")
	if err := os.WriteFile(path, []byte("[store]\npath = \""+dir+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runMF(t, "migrate", "--config", path); err == nil || !strings.Contains(err.Error(), `store.path "`+dir+`"`) {
		t.Fatalf("mf migrate of a store.path that is a directory: %v; want an error naming store.path and the path", err)
	}
}

// A store.path that holds something other than mf's database is refused
// with what it is, and left as it was; a store another mf runs on is
// refused as in use. Both carried a hint that the directory must exist and
// be writable and the path not be a directory, which held for neither and
// sent the operator to check permissions.
func TestASQLiteStoreThatCannotBeUsedSaysWhy(t *testing.T) {
	t.Run("not a database", func(t *testing.T) {
		dir := t.TempDir()
		db := filepath.Join(dir, "mf.db")
		junk := []byte("MSH|^~\\&|a file of messages, not a database\r")
		if err := os.WriteFile(db, junk, 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "mf.toml")
		if err := os.WriteFile(path, []byte("[store]\npath = \""+db+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := runMF(t, "migrate", "--config", path)
		if err == nil || !strings.Contains(err.Error(), db+" is not a SQLite database") || strings.Contains(err.Error(), "directory must exist") {
			t.Fatalf("mf migrate of a store.path that is not a database: %v; want it said, without a hint about its directory", err)
		}
		if b, err := os.ReadFile(db); err != nil || !bytes.Equal(b, junk) {
			t.Fatalf("the file at store.path after mf migrate: %q, %v; want it left as it was", b, err)
		}
	})
	t.Run("in use", func(t *testing.T) {
		path := writeConfig(t)
		db := filepath.Join(filepath.Dir(path), "mf.db")
		other, err := sqlite.Open(context.Background(), sqlite.Options{Path: db, Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if err := os.WriteFile(path, []byte("[store]\npath = \""+db+"\"\n[api]\nlisten = \""+enginetest.FreeAddr(t)+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = runMF(t, "run", "--config", path)
		if err == nil || !strings.Contains(err.Error(), "in use by another mf process") || strings.Contains(err.Error(), "directory must exist") {
			t.Fatalf("mf run on a store another process runs on: %v; want it refused as in use, without a hint about its directory", err)
		}
	})
}

// A mistyped command is named as unknown, with the commands there are: it
// was "No help topic for 'stauts'", which reads as a question about help.
func TestAnUnknownCommandIsNamed(t *testing.T) {
	for _, args := range [][]string{{"stauts"}, {"token", "neww"}} {
		out, err := runMF(t, args...)
		bad := args[len(args)-1]
		if err == nil || !strings.Contains(err.Error(), `unknown command "`+bad+`"`) {
			t.Errorf("mf %s: error %v, printed %q; want %q named as an unknown command", strings.Join(args, " "), err, out, bad)
		}
	}
}

// An empty --config (mf check --config "$CFG" with CFG unset) is refused:
// it was taken for no --config, so mf check checked the built-in default
// and said ok, and mf run ran it. So is an empty MF_CONFIG. (mf run reads
// its config as these do; run here, the engine would run until the test
// timed out.)
func TestAnEmptyConfigIsRefused(t *testing.T) {
	t.Chdir(t.TempDir()) // no ./mf.toml: the built-in default's place
	for _, cmd := range []string{"check", "migrate", "reload"} {
		out, err := runMF(t, cmd, "--config", "")
		if err == nil || !strings.Contains(err.Error(), "--config (or MF_CONFIG) is empty") {
			t.Errorf("mf %s --config '': %v, printed %q; want it refused as empty", cmd, err, out)
		}
	}
	t.Setenv("MF_CONFIG", "")
	if out, err := runMF(t, "check"); err == nil || !strings.Contains(err.Error(), "--config (or MF_CONFIG) is empty") {
		t.Errorf("MF_CONFIG= mf check: %v, printed %q; want it refused as empty", err, out)
	}
}

// mf run stopped while it still opens its store (a stop right after a
// start, a large SQLite store's first open) is a clean stop, as one while
// it waits for its database is: it returned "sqlite: open …: context
// canceled", an exit of 1 that a service manager takes for a failure.
func TestRunStoppedWhileOpeningItsStoreIsAStop(t *testing.T) {
	path := writeConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	if err := App(&out, &out).RunContext(ctx, []string{"mf", "run", "--config", path}); err != nil {
		t.Fatalf("mf run stopped before its store opened: %v; want a clean stop", err)
	}
}

// mf run logs the migrations it applied at start (an upgrade's schema
// change, or a new store's), and nothing when there were none.
func TestRunLogsTheMigrationsItApplied(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mf.toml")
	cfg := fmt.Sprintf("[store]\npath = %q\n[api]\nlisten = %q\n", filepath.Join(dir, "mf.db"), enginetest.FreeAddr(t))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := runInProcess(t, path)
	enginetest.WaitFor(t, "the engine to run", 30*time.Second, func() bool { return strings.Contains(logs.String(), "graph started") })
	if !strings.Contains(logs.String(), "store: schema created or brought up to date") {
		t.Fatalf("a new store's migrations were not logged:\n%s", logs.String())
	}
}

// A SQLite store.path whose directory does not exist: mf check warns, and
// mf run's error says to create the directory. mf check said ok, and mf
// run failed on "open lock file ...: no such file or directory".
func TestAStoreDirectoryThatDoesNotExistIsSaid(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mf.toml")
	missing := filepath.Join(dir, "no-such-dir")
	cfg := "[store]\npath = \"" + filepath.Join(missing, "mf.db") + "\"\n[api]\nlisten = \"" + enginetest.FreeAddr(t) + "\"\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runMF(t, "check", "--config", path)
	if err != nil || !strings.Contains(out, "warning: store.path: the directory "+missing+" does not exist here") {
		t.Fatalf("mf check: %v, printed %q; want a warning naming the directory", err, out)
	}
	_, err = runMF(t, "run", "--config", path)
	if err == nil || !strings.Contains(err.Error(), "the directory "+missing+" of the store does not exist") || !strings.Contains(err.Error(), "create it") {
		t.Fatalf("mf run: %v; want it to say the directory does not exist", err)
	}
}

package sqlserver_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// mergeHint matches the table hint of a MERGE target, which sqlfluff 1.4.5
// (Debian 12's) cannot parse although SQL Server takes it: "MERGE mf_nodes
// WITH (HOLDLOCK) AS n" fails there while "MERGE mf_nodes AS n" parses.
var mergeHint = regexp.MustCompile(`(?i)(MERGE\s+\w+)\s+WITH\s*\(\s*HOLDLOCK\s*\)`)

// lockTimeout matches SET LOCK_TIMEOUT, which sqlfluff 1.4.5 does not parse
// ("Found unparsable section") although it is T-SQL (SET LOCK_TIMEOUT
// timeout_period, in milliseconds; -1 waits without end): it is read as
// another SET statement of the same shape.
var lockTimeout = regexp.MustCompile(`(?i)\bSET\s+LOCK_TIMEOUT\s+-?\d+`)

// TestEveryStatementParsesAsTSQL parses every statement of the dialect with
// sqlfluff's T-SQL grammar. No SQL Server runs here, so without
// MF_TEST_SQLSERVER_URL this is the only check that the dialect's SQL is
// SQL Server's and not PostgreSQL's (LIMIT, RETURNING, ON CONFLICT) or
// broken. A parse is not a run: names, types and semantics are checked
// only by the conformance suite against a real server.
func TestEveryStatementParsesAsTSQL(t *testing.T) {
	sqlfluff, err := exec.LookPath("sqlfluff")
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("sqlfluff is not installed (CI=true: .ci/run installs Debian's sqlfluff package)")
		}
		t.Skip("sqlfluff not installed (Debian package sqlfluff)")
	}
	var files []string
	for _, glob := range []string{"sql/*.sql", "migrations/*.sql", "testdata/*.sql"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 40 {
		t.Fatalf("found %d .sql files of the dialect, want the whole dialect: %v", len(files), files)
	}
	dir := t.TempDir()
	hints, timeouts := 0, 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		hints += len(mergeHint.FindAll(b, -1))
		b = mergeHint.ReplaceAll(b, []byte("$1"))
		timeouts += len(lockTimeout.FindAll(b, -1))
		b = lockTimeout.ReplaceAll(b, []byte("SET NOCOUNT ON"))
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d files; %d MERGE table hints left out and %d SET LOCK_TIMEOUT read as SET NOCOUNT for sqlfluff", len(files), hints, timeouts)
	// The grammar must refuse what SQL Server refuses, or this checks
	// nothing: PostgreSQL's LIMIT is the likeliest slip in a port.
	probe := "probe_postgres_limit.sql"
	if err := os.WriteFile(filepath.Join(dir, probe), []byte("SELECT id FROM mf_queue WHERE lane = @lane LIMIT 1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// L001 (trailing whitespace) only so that style rules stay quiet;
	// parse failures (PRS) are reported whatever rules are chosen.
	cmd := exec.Command(sqlfluff, "lint", "--dialect", "tsql", "--rules", "L001", "--format", "json", "--nofail", "--disable-progress-bar", ".")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sqlfluff lint: %v\n%s", err, out)
	}
	var report []struct {
		Filepath   string `json:"filepath"`
		Violations []struct {
			Line        int    `json:"line_no"`
			Code        string `json:"code"`
			Description string `json:"description"`
		} `json:"violations"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("sqlfluff's report: %v\n%s", err, out)
	}
	probeRefused := false
	for _, f := range report {
		for _, v := range f.Violations {
			if strings.HasPrefix(v.Code, "L") { // a style rule, not the grammar
				continue
			}
			if f.Filepath == probe {
				probeRefused = true
				continue
			}
			t.Errorf("%s:%d: %s: %s", f.Filepath, v.Line, v.Code, v.Description)
		}
	}
	if !probeRefused {
		t.Fatalf("sqlfluff parsed PostgreSQL's LIMIT as T-SQL: it checks nothing here\n%s", out)
	}
}

package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pglatency runs bench/lib.sh's pglatency on a pgbench log of lines and
// returns what it prints.
func pglatency(t *testing.T, lines []string) string {
	t.Helper()
	lib, err := filepath.Abs("../bench/lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "pglat.1")
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", "-c", `. "$1" && pglatency "$2"`, "bash", lib, log).CombinedOutput()
	if err != nil {
		t.Fatalf("pglatency: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// With -R, the time column of pgbench's per-transaction log (the third)
// already runs from the scheduled start: pgbench takes it as now -
// txn_scheduled, and logs the schedule lag (the seventh) beside it, a part
// of it. This line is pgbench 15's, from -R 40 over one client of
// "SELECT pg_sleep(0.05)": 1,006,567 µs is the lag, 956,217, and the 50 ms
// of the statement. bench/run added the two, counting the lag twice: its
// pgbench floor read 1962.78 ms here.
func TestPglatencyCountsTheScheduleLagOnce(t *testing.T) {
	t.Parallel()
	lines := make([]string, 10)
	for i := range lines {
		lines[i] = "0 39 1006567 0 1795744013 297154 956217"
	}
	if got, want := pglatency(t, lines), "1006.57 1006.57"; got != want {
		t.Fatalf("pglatency of transactions of 1006.567 ms from their schedule (956.217 of it lag): %q, want %q", got, want)
	}
}

package cli

import (
	"fmt"
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

// pglatency's p50 and p99 are nearest-rank, as mf bench's are (the
// ceil(q*n)-th smallest): of 1 to 100 ms, 50 and 99. It took the
// (floor(q*n)+1)-th, one rank high whenever q*n is whole: 51 and the
// maximum, 100.
func TestPglatencyTakesTheNearestRank(t *testing.T) {
	t.Parallel()
	lines := make([]string, 100)
	for i := range lines {
		lines[i] = fmt.Sprintf("%d %d %d 0 1795744013 297154 0", i%32, i, (i+1)*1000) // (i+1) ms, no lag
	}
	if got, want := pglatency(t, lines), "50.00 99.00"; got != want {
		t.Fatalf("pglatency of 1 to 100 ms: %q, want %q (nearest rank)", got, want)
	}
	// Not whole: the 3rd of 5 (p50) and the 5th (p99).
	if got, want := pglatency(t, lines[:5]), "3.00 5.00"; got != want {
		t.Fatalf("pglatency of 1 to 5 ms: %q, want %q (nearest rank)", got, want)
	}
}

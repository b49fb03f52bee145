package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// mf builds for Windows, where many hospitals run their integration
// engines. Only the build is checked: no Windows machine runs these tests.
//
// The build compiles every dependency for Windows (modernc.org/sqlite's
// most of all): about three minutes of CPU on the 2-core CI machine, which,
// run alone, held up every test of this package behind it. It runs beside
// the other parallel tests, niced where nice(1) is found, so that it takes
// the CPU that their processes, mostly waiting on timers and failovers,
// leave idle.
func TestMfBuildsForWindows(t *testing.T) {
	t.Parallel()
	args := []string{"go", "build", "-o", filepath.Join(t.TempDir(), "mf.exe"), "."}
	if nice, err := exec.LookPath("nice"); err == nil {
		args = append([]string{nice, "-n", "19"}, args...)
	}
	build := exec.Command(args[0], args[1:]...)
	build.Dir = ".."
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=windows go build: %v\n%s", err, out)
	}
}

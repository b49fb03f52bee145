package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// mf builds for Windows, where many hospitals run their integration
// engines. Only the build is checked: no Windows machine runs these tests.
func TestMfBuildsForWindows(t *testing.T) {
	build := exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "mf.exe"), ".")
	build.Dir = ".."
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=windows go build: %v\n%s", err, out)
	}
}

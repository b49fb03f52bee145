package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An MLLP client that is not ours, python-hl7's mllp_send (Debian package
// python3-hl7), sends the example messages to mf run: each is answered AA
// with its own control id, and each reaches the destination.
func TestMLLPSendInterop(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("mllp_send")
	if err != nil {
		if ciEnabled() { // as every other CI check reads CI: CI=1 too
			t.Fatal("mllp_send is missing (Debian package python3-hl7; .ci/run installs it)")
		}
		t.Skip("mllp_send not installed (apt-get install python3-hl7)")
	}
	e := startEngine(t, `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "{{listen}}"

[[outbound]]
name = "out"
type = "file"
directory = "{{dir}}/out"

[[route]]
from = "adt_in"
to = ["out"]
lane_key = "PID-3.1"
`)
	example, err := filepath.Abs("../examples/adt.hl7")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	var want []string // the control ids, in the file's order
	for _, line := range strings.FieldsFunc(string(b), func(r rune) bool { return r == '\r' || r == '\n' }) {
		if f := strings.Split(line, "|"); f[0] == "MSH" && len(f) > 9 {
			want = append(want, f[9])
		}
	}
	host, port, _ := strings.Cut(e.listen, ":")
	out, err := exec.Command(bin, "--loose", "--file", example, "--port", port, host).CombinedOutput()
	if err != nil {
		t.Fatalf("mllp_send: %v\n%s", err, out)
	}
	var acks []string // MSA segments, in order
	for _, line := range strings.FieldsFunc(string(out), func(r rune) bool { return r == '\r' || r == '\n' }) {
		if strings.HasPrefix(line, "MSA|") {
			acks = append(acks, line)
		}
	}
	if len(acks) != len(want) || len(want) == 0 {
		t.Fatalf("%d messages sent, %d ACKs:\n%s", len(want), len(acks), out)
	}
	for i, msa := range acks {
		if msa != "MSA|AA|"+want[i] && !strings.HasPrefix(msa, "MSA|AA|"+want[i]+"|") {
			t.Fatalf("ACK %d is %q, want AA for %s", i, msa, want[i])
		}
	}
	waitFor(t, "every message in out/", 10*time.Second, func() bool {
		files, _ := os.ReadDir(filepath.Join(e.dir, "out"))
		return len(files) == len(want)
	})
}

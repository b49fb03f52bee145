package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// mf token new prints a token and the config lines for it; with that token in
// MF_API_TOKEN, mf status and mf nodes read a running node's API, as a table
// or as JSON, and without it they say what is missing.
func TestTokenStatusAndNodesCommands(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(mfBin, "token", "new", "--role", "viewer", "--name", "ops").CombinedOutput()
	if err != nil {
		t.Fatalf("mf token new: %v\n%s", err, out)
	}
	token := regexp.MustCompile(`token: (mf_\S+)`).FindStringSubmatch(string(out))
	block := regexp.MustCompile(`(?s)\[\[api\.tokens\]\].*`).FindString(string(out))
	if token == nil || !strings.Contains(block, `role = "viewer"`) || !strings.Contains(block, `name = "ops"`) {
		t.Fatalf("mf token new printed:\n%s", out)
	}
	apiAddr := freePortNoT()
	startEngine(t, `
[api]
listen = "`+apiAddr+`"
`+block+`
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
`)
	run := func(withToken bool, args ...string) (string, error) {
		cmd := exec.Command(mfBin, append(args, "--api", "http://"+apiAddr)...)
		cmd.Env = os.Environ()
		if withToken {
			cmd.Env = append(cmd.Env, "MF_API_TOKEN="+token[1])
		}
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	if out, err := run(true, "status"); err != nil || !regexp.MustCompile(`role\s+single-node`).MatchString(out) {
		t.Fatalf("mf status: %v\n%s", err, out)
	}
	out2, err := run(true, "status", "--json")
	var st map[string]any
	if err != nil || json.Unmarshal([]byte(out2), &st) != nil || st["role"] != "single-node" {
		t.Fatalf("mf status --json: %v\n%s", err, out2)
	}
	if out, err := run(true, "nodes"); err != nil || !strings.Contains(out, "NODE") || !strings.Contains(out, "leader: ") {
		t.Fatalf("mf nodes: %v\n%s", err, out)
	}
	if out, err := run(false, "status"); err == nil || !strings.Contains(out, "MF_API_TOKEN") {
		t.Fatalf("mf status without a token: %v\n%s", err, out)
	}
}

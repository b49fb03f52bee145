package actors_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// A reload logs the warnings of the config it puts in force, as mf run
// logs those of the file it starts with (DESIGN §10: a listener on the
// network without TLS, allowed by allow_plaintext, is logged at WARN).
// Before, a reload that opened such a listener, or turned log_payloads on
// (patient data in the logs), said only "config reloaded".
func TestAReloadLogsTheWarningsOfItsConfig(t *testing.T) {
	started := oneInbound(t, "quiet_in", enginetest.FreeAddr(t), "quiet_out", filepath.Join(t.TempDir(), "out"))
	_, port, _ := strings.Cut(enginetest.FreeAddr(t), ":")
	next, err := config.Parse([]byte(fmt.Sprintf(`
log_payloads = true

[[inbound]]
name = "quiet_in"
type = "mllp"
listen = "0.0.0.0:%s"
allow_plaintext = true

[[outbound]]
name = "quiet_out"
type = "file"
directory = %q

[[route]]
from = "quiet_in"
to = ["quiet_out"]
`, port, filepath.Join(t.TempDir(), "out"))), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Warnings()) != 2 {
		t.Fatalf("the reloaded config has warnings %q; want two", next.Warnings())
	}
	e := startScripted(t, started, func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) { return next, nil }
	})
	e.reload(t, 2) // a standby: no port is opened
	logs := e.logs.String()
	for _, want := range []string{"allow_plaintext = true", "log_payloads = true"} {
		found := false
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("no WARN line about %q after the reload; logs:\n%s", want, logs)
		}
	}
}

// A standby whose reload failed (its copy of the file did not load) runs
// on its older config; the ERROR says so then. When it is elected later,
// perhaps weeks later, it leads on that older config: that must be said
// again then, where whoever looks at the failover reads, not only in a
// line from the time of the reload.
func TestANodeElectedOnAConfigItFailedToReloadSaysSo(t *testing.T) {
	started := oneInbound(t, "stale_in", enginetest.FreeAddr(t), "stale_out", filepath.Join(t.TempDir(), "out"))
	e := startScripted(t, started, func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) {
			return config.Parse([]byte("[[inbound]]\nname = \"stale_in\"\nlisten = ["), "test.toml")
		}
	})
	e.tell(leadership.ConfigChanged{Version: 2}) // a standby: the reload fails
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	enginetest.WaitFor(t, "the graph to start", 10*time.Second, func() bool {
		return strings.Contains(e.logs.String(), "graph started")
	})
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, `"failed_config_version":2`) {
			return
		}
	}
	t.Fatalf("no WARN at the election that this node leads on a config older than version 2, which it failed to reload; logs:\n%s", e.logs.String())
}

// A reload that changes how a destination is split into lanes (lane_key)
// says so, naming the destination (here on a standby, which applies it and
// moves the queued rows when promoted; the leader's move is
// TestAReloadThatChangesALaneKeyKeepsAPatientsMessagesInOrder).
func TestAReloadThatChangesALaneKeySaysSo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	listen := enginetest.FreeAddr(t)
	started := oneInbound(t, "split_in", listen, "split_out", dir)
	next := oneInbound(t, "split_in", listen, "split_out", dir)
	next.Route[0].LaneKey = "PID-3.1"
	e := startScripted(t, started, func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) { return next, nil }
	})
	e.tell(leadership.ConfigChanged{Version: 2})
	select {
	case <-e.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the reload was not confirmed")
	}
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, `"level":"info"`) && strings.Contains(line, `"destination":"split_out"`) && strings.Contains(line, "lane_key") {
			return
		}
	}
	t.Fatalf("no INFO that the reload changes the lanes of split_out; logs:\n%s", e.logs.String())
}

// A leader whose reload fails (its copy of the file does not load) keeps
// its graph running on the config in force: its port stays open, the graph
// is not stopped, and its status still names the version it runs.
func TestAFailedReloadKeepsTheRunningGraph(t *testing.T) {
	listen := enginetest.FreeAddr(t)
	started := oneInbound(t, "adt_in", listen, "out", filepath.Join(t.TempDir(), "out"))
	e := startScripted(t, started, func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) {
			return config.Parse([]byte("[[inbound]]\nname = \"adt_in\"\nlisten = ["), "test.toml")
		}
	})
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(listen) })
	e.tell(leadership.ConfigChanged{Version: 2})
	enginetest.WaitFor(t, "the reload to fail", 10*time.Second, func() bool {
		return strings.Contains(e.logs.String(), "config reload failed")
	})
	if !open(listen) || strings.Contains(e.logs.String(), "graph stopped") {
		t.Fatalf("after a reload that failed: port open %v; want the graph running on the config in force; logs:\n%s", open(listen), e.logs.String())
	}
	if v := e.eng.Status().ConfigVersion; v == 2 {
		t.Fatalf("status config version %d after its reload failed; want the version it runs", v)
	}
}

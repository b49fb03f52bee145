package actors_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/internal/tlsfiles"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// scrape returns the lines of the process's metrics that start with prefix.
func scrape(prefix string) []string {
	var b bytes.Buffer
	metrics.WritePrometheus(&b, false)
	var out []string
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return out
}

// oneInbound is a config with an MLLP inbound in on listen routed to a file
// destination out (in dir).
func oneInbound(t *testing.T, in, listen, out, dir string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
[[inbound]]
name = %q
type = "mllp"
listen = %q

[[outbound]]
name = %q
type = "file"
directory = %q

[[route]]
from = %q
to = [%q]
`, in, listen, out, dir, in, out)), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// An inbound that a reload takes out has no listener any more: its
// mf_listener_bound series must go with it. Left at 0 on the primary, it
// matched the alert the README gives (mf_is_leader == 1 with
// mf_listener_bound == 0) until the node was restarted.
func TestAReloadRetiresTheBoundSeriesOfARemovedInbound(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	oldListen, newListen := enginetest.FreeAddr(t), enginetest.FreeAddr(t)
	started := oneInbound(t, "retired_in", oldListen, "retired_out", dir)
	next := oneInbound(t, "kept_in", newListen, "retired_out", dir)
	e := startScripted(t, started, func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) { return next, nil }
	})
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(oldListen) })
	waitBound(t, "retired_in", "before the reload")
	e.reload(t, 2)
	enginetest.WaitFor(t, "the reloaded graph's port to open", 5*time.Second, func() bool { return open(newListen) })
	if !e.eng.Status().Leader {
		t.Fatal("this node no longer leads after the reload")
	}
	if got := scrape(`mf_listener_bound{inbound="retired_in"}`); len(got) != 0 {
		t.Fatalf("after a reload that took inbound retired_in out, the leader still exports %q", got)
	}
	waitBound(t, "kept_in", "the reloaded inbound")
}

// waitBound waits for inbound's mf_listener_bound series to be 1. The
// listener sets it just after its port opens, and a connection can come in
// between: a scrape right after one found it at 0.
func waitBound(t *testing.T, inbound, when string) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got = scrape(`mf_listener_bound{inbound="` + inbound + `"}`)
		if len(got) == 1 && strings.HasSuffix(got[0], " 1") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s, 5 s after its port opened: %q; want the series at 1", when, got)
		}
	}
}

// A reload that adds an inbound and a destination gives them their series
// at zero, as a start does for those of its config (api registerMetrics),
// on every node, leading or not: a counter that first appears at 1 has no
// increase for Prometheus, and an alert on dead deliveries of a destination
// added by a reload missed its first one.
func TestAReloadGivesAddedConnectionsTheirSeriesAtZero(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	started := oneInbound(t, "before_in", enginetest.FreeAddr(t), "before_out", dir)
	next, err := config.Parse([]byte(fmt.Sprintf(`
[[inbound]]
name = "before_in"
type = "mllp"
listen = %q

[[inbound]]
name = "added_in"
type = "mllp"
listen = %q

[[outbound]]
name = "before_out"
type = "file"
directory = %q

[[outbound]]
name = "added_out"
type = "file"
directory = %q

[[route]]
from = "before_in"
to = ["before_out"]

[[route]]
from = "added_in"
to = ["added_out"]
`, enginetest.FreeAddr(t), enginetest.FreeAddr(t), dir, filepath.Join(t.TempDir(), "added"))), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	e := startScripted(t, started, func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) { return next, nil }
	})
	// A standby: no graph, no traffic.
	e.reload(t, 2)
	for _, series := range []string{
		`mf_deliveries_total{destination="added_out",result="dead"} 0`,
		`mf_delivery_duration_seconds_count{destination="added_out"} 0`,
		`mf_messages_received_total{inbound="added_in"} 0`,
		`mf_messages_rejected_total{inbound="added_in",reason="store"} 0`,
		`mf_listener_bound{inbound="added_in"} 0`,
	} {
		name, _, _ := strings.Cut(series, " ")
		if got := scrape(name); len(got) != 1 || got[0] != series {
			t.Errorf("after a reload that added it: %q; want %q", got, series)
		}
	}
}

// The config an engine starts with gives its connections their series at
// zero, whoever built the API: a clustered node reads its file again once it
// has read the shared version (cli), and connections only that read had
// appeared with their first count.
func TestAStartGivesItsConnectionsTheirSeriesAtZero(t *testing.T) {
	started := oneInbound(t, "startup_in", enginetest.FreeAddr(t), "startup_out", filepath.Join(t.TempDir(), "out"))
	startScripted(t, started, nil)
	for _, series := range []string{
		`mf_deliveries_total{destination="startup_out",result="dead"} 0`,
		`mf_messages_received_total{inbound="startup_in"} 0`,
		`mf_listener_bound{inbound="startup_in"} 0`,
	} {
		name, _, _ := strings.Cut(series, " ")
		if got := scrape(name); len(got) != 1 || got[0] != series {
			t.Errorf("after a start with it: %q; want %q", got, series)
		}
	}
}

// Every node exports when each certificate its config names expires, read
// at start and again at each reload (whose graph reads the files again):
// what monitoring alerts on before peers refuse the handshakes. A reload
// retires the series of an endpoint it took out, and keeps the API's, whose
// certificate is loaded at the process's start (and renewals from disk)
// only.
func TestCertificateExpiriesAreExported(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	now := time.Now().Truncate(time.Second)
	inCert, inKey := p.ServerCertValid(t, dir, "in", now.Add(-time.Hour), now.Add(40*24*time.Hour))
	apiCert, apiKey := p.ServerCertValid(t, dir, "api", now.Add(-time.Hour), now.Add(90*24*time.Hour))
	outCert, outKey := p.ServerCertValid(t, dir, "out", now.Add(-time.Hour), now.Add(10*24*time.Hour))
	site := func(in, out string) *config.Config {
		t.Helper()
		c, err := config.Parse([]byte(fmt.Sprintf(`
[api]
listen = "127.0.0.1:1"
tls_cert = %q
tls_key = %q

[[inbound]]
name = "tls_in"
type = "mllp"
listen = %q
%s

[[outbound]]
name = "tls_out"
type = "mllp"
address = "127.0.0.1:1"
tls = true
%s

[[route]]
from = "tls_in"
to = ["tls_out"]
`, apiCert, apiKey, enginetest.FreeAddr(t), in, out)), "test.toml")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	started := site(fmt.Sprintf("tls_cert = %q\ntls_key = %q", inCert, inKey), "")
	next := site("allow_plaintext = true", fmt.Sprintf("tls_cert = %q\ntls_key = %q", outCert, outKey))
	e := startScripted(t, started, func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) { return next, nil }
	})
	want := func(when, series string, at time.Time) {
		t.Helper()
		got := scrape(series)
		if w := fmt.Sprintf("%s %d", series, at.Unix()); len(got) != 1 || got[0] != w {
			t.Errorf("%s: %q; want %q", when, got, w)
		}
	}
	want("at start", `mf_tls_cert_expiry_timestamp_seconds{kind="inbound",name="tls_in"}`, now.Add(40*24*time.Hour))
	want("at start", `mf_tls_cert_expiry_timestamp_seconds{kind="api",name="api"}`, now.Add(90*24*time.Hour))
	if got := scrape(`mf_tls_cert_expiry_timestamp_seconds{kind="outbound"`); len(got) != 0 {
		t.Errorf("at start, with no outbound certificate: %q", got)
	}
	e.reload(t, 2)
	want("after the reload", `mf_tls_cert_expiry_timestamp_seconds{kind="outbound",name="tls_out"}`, now.Add(10*24*time.Hour))
	want("after the reload", `mf_tls_cert_expiry_timestamp_seconds{kind="api",name="api"}`, now.Add(90*24*time.Hour))
	if got := scrape(`mf_tls_cert_expiry_timestamp_seconds{kind="inbound"`); len(got) != 0 {
		t.Errorf("after a reload that took the inbound's certificate out: %q", got)
	}
	// The API's certificate renewed on disk, as the API loads it (its
	// handshakes take renewals): its series, kept by the reload, follows.
	p.ServerCertValid(t, dir, "api", now.Add(-time.Hour), now.Add(120*24*time.Hour))
	if _, err := tlsfiles.LoadPair(tlsfiles.Endpoint{Kind: "api", Name: "api"}, apiCert, apiKey, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	want("after the API's renewal", `mf_tls_cert_expiry_timestamp_seconds{kind="api",name="api"}`, now.Add(120*24*time.Hour))
}

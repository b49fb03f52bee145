package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
)

// The alerting rules shipped in examples/ and their unit tests.
const (
	alertRules     = "../examples/alerts.yml"
	alertRuleTests = "../examples/alerts_test.yml"
)

// promBin finds one of Debian's prometheus package's binaries, or skips
// (fails under CI=true, where .ci/run installs the package).
func promBin(t *testing.T, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if ciEnabled() {
			t.Fatalf("%s is missing (Debian package prometheus; .ci/run installs it)", name)
		}
		t.Skipf("%s not installed (apt-get install prometheus)", name)
	}
	return bin
}

// examples/alerts.yml is valid, and each of its rules fires and does not
// fire where its unit tests say (examples/alerts_test.yml).
func TestAlertRulesPassPromtool(t *testing.T) {
	t.Parallel()
	promtool := promBin(t, "promtool")
	for _, args := range [][]string{{"check", "rules", alertRules}, {"test", "rules", alertRuleTests}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// fastRules is the rules file at 60 times its speed, for a Prometheus that
// scrapes and evaluates every second: each minute (and hour) of a `for:`, a
// range or a subquery becomes a second. The shipped file
// stays as it is; its rules keep their shape.
func fastRules(t *testing.T, rules string) string {
	t.Helper()
	out := regexp.MustCompile(`for: (\d+)m\b`).ReplaceAllString(rules, "for: ${1}s")
	out = regexp.MustCompile(`for: (\d+)h\b`).ReplaceAllStringFunc(out, func(f string) string {
		n, _ := strconv.Atoi(f[len("for: ") : len(f)-1])
		return fmt.Sprintf("for: %ds", n*60)
	})
	out = regexp.MustCompile(`\[(\d+)m\]`).ReplaceAllString(out, "[${1}s]")
	out = regexp.MustCompile(`\[(\d+)h\]`).ReplaceAllStringFunc(out, func(h string) string {
		n, _ := strconv.Atoi(h[1 : len(h)-2])
		return fmt.Sprintf("[%ds]", n*60)
	})
	out = regexp.MustCompile(`\[(\d+)m:(\d+)m\]`).ReplaceAllString(out, "[${1}s:${2}s]")
	// A duration the rewrite missed would keep the test waiting minutes.
	if left := regexp.MustCompile(`for: \d+[mh]\b|\[\d+[mh](:\d+[mh])?\]`).FindAllString(out, -1); len(left) > 0 {
		t.Fatalf("the rules' durations %v were not sped up: teach fastRules their form", left)
	}
	return out
}

// prometheus is a Prometheus server of the test's own.
type prometheus struct {
	url    string
	logs   *enginetest.LogBuffer
	cmd    *exec.Cmd
	exited chan struct{}
}

// startPrometheus runs Prometheus with the shipped rules (sped up, see
// fastRules), scraping and evaluating every second, scraping the API of
// each of targets (host:port) as job mf with the viewer token.
func startPrometheus(t *testing.T, targets []string) *prometheus {
	t.Helper()
	bin := promBin(t, "prometheus")
	dir := t.TempDir()
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("alerts.yml", fastRules(t, string(rules)))
	write("token", viewerToken)
	quoted := make([]string, len(targets))
	for i, a := range targets {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	cfg := write("prometheus.yml", `
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [alerts.yml]
scrape_configs:
  - job_name: mf
    authorization:
      type: Bearer
      credentials_file: token
    static_configs:
      - targets: [`+strings.Join(quoted, ", ")+`]
`)
	addr := freePort(t)
	p := &prometheus{url: "http://" + addr, logs: &enginetest.LogBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("--- prometheus:\n%s", p.logs.String())
		}
	})
	waitFor(t, "prometheus to be ready", 30*time.Second, func() bool {
		select {
		case <-p.exited:
			t.Fatalf("prometheus exited:\n%s", p.logs.String())
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// alert is one of Prometheus's active alerts.
type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"` // pending or firing
}

func (a alert) String() string {
	var ls []string
	for k, v := range a.Labels {
		if k != "alertname" && k != "severity" {
			ls = append(ls, k+"="+v)
		}
	}
	sort.Strings(ls)
	return a.Labels["alertname"] + "{" + strings.Join(ls, ",") + "}"
}

// firing returns the alerts firing now, by GET /api/v1/alerts.
func (p *prometheus) firing(t *testing.T) []alert {
	t.Helper()
	resp, err := http.Get(p.url + "/api/v1/alerts")
	if err != nil {
		t.Fatalf("GET /api/v1/alerts: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []alert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("GET /api/v1/alerts: %s, %v", body.Status, err)
	}
	var out []alert
	for _, a := range body.Data.Alerts {
		if a.State == "firing" {
			out = append(out, a)
		}
	}
	return out
}

// query returns the value of each series of the instant query q, keyed
// by the series' instance label.
func (p *prometheus) query(t *testing.T, q string) map[string]string {
	t.Helper()
	resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("query %s: %s, %v", q, body.Status, err)
	}
	out := map[string]string{}
	for _, r := range body.Data.Result {
		out[r.Metric["instance"]] = fmt.Sprint(r.Value[1])
	}
	return out
}

// alertWatch follows Prometheus's firing alerts for a test, remembering
// every alert it saw firing.
type alertWatch struct {
	t    *testing.T
	p    *prometheus
	seen map[string]bool // alert.String()
}

func (w *alertWatch) poll() []alert {
	as := w.p.firing(w.t)
	for _, a := range as {
		w.seen[a.String()] = true
	}
	return as
}

// has reports whether alerts holds name with the labels want.
func has(alerts []alert, name string, want map[string]string) bool {
	for _, a := range alerts {
		if a.Labels["alertname"] != name {
			continue
		}
		match := true
		for k, v := range want {
			match = match && a.Labels[k] == v
		}
		if match {
			return true
		}
	}
	return false
}

// waitFiring waits until the alert name with labels fires.
func (w *alertWatch) waitFiring(name string, labels map[string]string, within time.Duration) {
	w.t.Helper()
	var last []alert
	deadline := time.Now().Add(within)
	for {
		if last = w.poll(); has(last, name, labels) {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s%v did not fire within %v; firing: %v", name, labels, within, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitResolved waits until no alert name fires.
func (w *alertWatch) waitResolved(name string, within time.Duration) {
	w.t.Helper()
	var last []alert
	deadline := time.Now().Add(within)
	for {
		if last = w.poll(); !has(last, name, nil) {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s still fires %v after the condition ended; firing: %v", name, within, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// operatorToken is an API token of role operator the alerts test's nodes
// accept, to retry a blocked lane's head.
const operatorToken = "e2e-operator-token"

// apiDo sends method path to e's API with token and returns the status and
// body.
func apiDo(t *testing.T, e *engine, method, path, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, e.api+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// The shipped alerting rules, in a real Prometheus scraping a real
// two-node cluster, fire on the conditions they are for and resolve when
// those end, and nothing else fires: an inbound's port held by another
// process (MfListenerNotBound on the primary only, until it is let go); a
// standby started with another route (MfConfigDrift, until its file is
// fixed and mf reload run); a message that is not HL7 (MfMessagesRejected);
// the destination down (MfDestinationDown and MfBacklogStuck), then back
// but answering AE (MfLanesBlocked), until it takes them and an operator
// retries the blocked heads; the database cut from both nodes (MfNoPrimary, MfStoreErrors and
// MfLeaderLostLease, until it answers again); the standby killed
// (MfNodeDown, until it runs again). Along the way the series the rules
// read are checked to be as the README says, standbys' included.
// Prometheus runs the rules 60 times faster (fastRules): each minute is a
// second.
func TestAlertsFireAndResolveInPrometheus(t *testing.T) {
	t.Parallel()
	promBin(t, "prometheus")
	destAddr := freePort(t)
	dest := startReceiver(t, destAddr)
	opSum := sha256.Sum256([]byte(operatorToken))
	// The port of inbound held_in, held by the test until it lets go.
	heldAddr := freePort(t)
	held, err := net.Listen("tcp", heldAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// held_in has a certificate, valid for a year, so that the nodes export
	// mf_tls_cert_expiry_timestamp_seconds, which the rules read.
	pkiDir := t.TempDir()
	pki := enginetest.NewPKI(t, pkiDir)
	heldCert, heldKey := pki.ServerCertValid(t, pkiDir, "held", time.Now().Add(-time.Hour), time.Now().Add(365*24*time.Hour))
	// crl_in takes mutual TLS with a CRL, current for a year, so that the
	// primary exports mf_tls_crl_next_update_timestamp_seconds, which the
	// rules read (MfCRLStale).
	crlAddr := freePort(t)
	crlFile := pki.WriteCRL(t, filepath.Join(pkiDir, "ca.crl"), enginetest.CRL{Number: 1, ThisUpdate: time.Now().Add(-time.Hour), NextUpdate: time.Now().Add(365 * 24 * time.Hour)})
	// Slower than fast: a primary fenced by a busy machine would make the
	// drifted standby primary, and the other node the drifted one.
	c := newCluster(t, timing{time.Second, 3 * time.Second, 5 * time.Second})
	c.edit = func(id, cfg string) string {
		cfg = strings.Replace(cfg, `address = "`+c.dest.addr()+`"`, `address = "`+destAddr+`"`, 1)
		cfg = strings.Replace(cfg, "retry_max_seconds = 0.5\n", "retry_max_seconds = 0.5\nmax_attempts = 3\n", 1)
		cfg = strings.Replace(cfg, "[[inbound]]", `[[api.tokens]]
name = "operator"
role = "operator"
sha256 = "`+hex.EncodeToString(opSum[:])+`"

[[inbound]]`, 1)
		cfg = strings.Replace(cfg, "[[route]]", `[[inbound]]
name = "held_in"
type = "mllp"
listen = "`+heldAddr+`"
tls_cert = "`+heldCert+`"
tls_key = "`+heldKey+`"

[[inbound]]
name = "crl_in"
type = "mllp"
listen = "`+crlAddr+`"
tls_cert = "`+pki.ServerCert+`"
tls_key = "`+pki.ServerKey+`"
client_ca = "`+pki.CAFile+`"
client_crl = ["`+crlFile+`"]

[[route]]
from = "held_in"
to = ["lab"]

[[route]]
from = "crl_in"
to = ["lab"]

[[route]]`, 1)
		if id == "node-1" {
			cfg = strings.Replace(cfg, sharedRoute, driftedRoute, 1)
		}
		return cfg
	}
	px0 := enginetest.StartProxy(t, enginetest.HostOf(t, c.url))
	px1 := enginetest.StartProxy(t, enginetest.HostOf(t, c.url))
	n0 := c.addNode(px0.Via(t, c.url))
	if p := c.waitForPrimary(-1); p != 0 {
		t.Fatalf("node-%d is primary; want node-0, the only node", p)
	}
	n1 := c.addNode(px1.Via(t, c.url))
	instance := func(e *engine) map[string]string {
		return map[string]string{"instance": strings.TrimPrefix(e.api, "http://")}
	}
	w := &alertWatch{t: t, p: startPrometheus(t, []string{strings.TrimPrefix(n0.api, "http://"), strings.TrimPrefix(n1.api, "http://")}), seen: map[string]bool{}}
	const within = 30 * time.Second
	t.Logf("Prometheus at %s scrapes node-0's API at %s, node-1's at %s", w.p.url, n0.api, n1.api)
	waitFor(t, "Prometheus to scrape both nodes", within, func() bool { return len(w.p.query(t, `up{job="mf"} == 1`)) == 2 })

	// The primary's listener for held_in cannot open its port, which the
	// test holds; the standby's, never open, is no alert.
	w.waitFiring("MfListenerNotBound", map[string]string{"instance": instance(n0)["instance"], "inbound": "held_in"}, within)
	// Every metric the rules read is one the nodes export (a rule on a
	// renamed metric would never fire).
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Compact(slices.Sorted(slices.Values(regexp.MustCompile(`\bmf_[a-z_]+`).FindAllString(string(rules), -1)))) {
		// A histogram's name is the stem of its series.
		if got := w.p.query(t, fmt.Sprintf("count(%s) or count(%s_count)", name, name)); len(got) == 0 {
			t.Errorf("the rules read %s, which no node exports", name)
		}
	}
	if got := w.p.query(t, `mf_listener_bound{inbound="adt_in"}`); !maps.Equal(got, map[string]string{instance(n0)["instance"]: "1", instance(n1)["instance"]: "0"}) {
		t.Fatalf("mf_listener_bound{inbound=\"adt_in\"} by instance is %v; want 1 on the primary node-0, 0 on the standby", got)
	}
	// Only the primary leads a term and renews its lease (MfLeaseRenewSlow
	// reads the renewals' histogram).
	if got := w.p.query(t, `mf_leader_term > 0`); len(got) != 1 || got[instance(n0)["instance"]] == "" {
		t.Fatalf("mf_leader_term > 0 by instance is %v; want node-0 alone, the primary", got)
	}
	// (Waited for: Prometheus may hold a second or two of samples yet.)
	var renewed map[string]string
	waitFor(t, "Prometheus to see node-0 renew its lease", within, func() bool {
		renewed = w.p.query(t, `increase(mf_lease_renew_duration_seconds_count[10s]) > 0`)
		return len(renewed) > 0
	})
	if len(renewed) != 1 || renewed[instance(n0)["instance"]] == "" {
		t.Fatalf("lease renewals in the last 10 s by instance: %v; want node-0 alone, the primary", renewed)
	}
	held.Close()
	w.waitResolved("MfListenerNotBound", within)

	// A standby whose route differs.
	w.waitFiring("MfConfigDrift", instance(n1), within)
	b, err := os.ReadFile(n1.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n1.config, []byte(strings.Replace(string(b), driftedRoute, sharedRoute, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mfBin, "reload", "--config", n0.config).CombinedOutput(); err != nil {
		t.Fatalf("mf reload: %v\n%s", err, out)
	}
	w.waitResolved("MfConfigDrift", within)

	// The destination down: its lanes wait for it (a dial that fails is no
	// attempt, so none blocks).
	dest.close()
	cl := enginetest.Dial(t, n0.listen)
	for i, p := range []string{"P1", "P2", "P1"} {
		if ack := cl.Send(string(adt(fmt.Sprintf("DOWN%d", i), p))); ack.Code != "AA" {
			t.Fatalf("message %d answered %s while the destination is down; want AA", i, ack.Code)
		}
	}
	// And a message that is not HL7: refused AR.
	if ack, err := enginetest.Dial(t, n0.listen).TrySend([]byte("not HL7")); err != nil || ack.Code != "AR" {
		t.Fatalf("a message that is not HL7 answered %v, %v; want AR", ack.Code, err)
	}
	lab := map[string]string{"destination": "lab"}
	w.waitFiring("MfMessagesRejected", map[string]string{"inbound": "adt_in", "reason": "parse"}, within)
	w.waitFiring("MfDestinationDown", lab, within)
	w.waitFiring("MfBacklogStuck", lab, within)
	if got := w.p.query(t, `mf_lanes_blocked`); !maps.Equal(got, map[string]string{instance(n0)["instance"]: "0", instance(n1)["instance"]: "0"}) {
		t.Fatalf("mf_lanes_blocked by instance is %v with the destination down; want 0 on both nodes (its lanes wait for it)", got)
	}
	// Back, answering AE to each of them: the two lanes retry, then block.
	dest = startReceiverAnswering(t, destAddr, func(received) string { return "AE" })
	w.waitFiring("MfLanesBlocked", nil, within)
	// The queue gauges are read from the database: the standby reports
	// the backlog too. The counters are each node's own.
	both := map[string]string{instance(n0)["instance"]: "3", instance(n1)["instance"]: "3"}
	if got := w.p.query(t, `mf_queue_depth{destination="lab"}`); !maps.Equal(got, both) {
		t.Fatalf("mf_queue_depth{destination=\"lab\"} by instance is %v; want 3 on both nodes", got)
	}
	// Each node reads the queue counts at most every 5 s (GET /metrics):
	// the other may show the blocked lanes a scrape later.
	waitFor(t, "mf_lanes_blocked 2 (P1, P2) on both nodes", within, func() bool {
		return maps.Equal(w.p.query(t, `mf_lanes_blocked`), map[string]string{instance(n0)["instance"]: "2", instance(n1)["instance"]: "2"})
	})
	if got := w.p.query(t, `mf_queue_oldest_age_seconds{destination="lab"} > 0`); len(got) != 2 {
		t.Fatalf("mf_queue_oldest_age_seconds{destination=\"lab\"} > 0 by instance is %v; want the waiting rows' age on both nodes", got)
	}
	// The primary's count has the 3 messages, the one not HL7 and
	// waitForPrimary's probes; the standby received none.
	if got := w.p.query(t, `mf_messages_received_total{inbound="adt_in"} >= 4`); len(got) != 1 || got[instance(n0)["instance"]] == "" {
		t.Fatalf("mf_messages_received_total{inbound=\"adt_in\"} >= 4 by instance is %v; want node-0 alone", got)
	}
	if got := w.p.query(t, `mf_messages_received_total{inbound="adt_in"}`); got[instance(n1)["instance"]] != "0" {
		t.Fatalf("mf_messages_received_total{inbound=\"adt_in\"} by instance is %v; want 0 on the standby node-1", got)
	}
	// Taking them again, and the blocked heads retried by an operator:
	// delivered.
	dest.close()
	dest = startReceiver(t, destAddr)
	code, body := apiDo(t, n0, "GET", "/lanes", operatorToken)
	var lanes struct {
		Lanes []struct {
			HeadID  int64 `json:"head_id"`
			Blocked bool  `json:"blocked"`
		} `json:"lanes"`
	}
	if err := json.Unmarshal(body, &lanes); code != http.StatusOK || err != nil {
		t.Fatalf("GET /lanes: %d %v %s", code, err, body)
	}
	for _, l := range lanes.Lanes {
		if l.Blocked {
			if code, body := apiDo(t, n0, "POST", fmt.Sprintf("/queue/%d/retry", l.HeadID), operatorToken); code != http.StatusOK {
				t.Fatalf("retry of blocked head %d: %d %s", l.HeadID, code, body)
			}
		}
	}
	waitFor(t, "the three messages at the destination", within, func() bool { return len(dest.received()) >= 3 })
	w.waitResolved("MfLanesBlocked", within)
	w.waitResolved("MfBacklogStuck", within)
	w.waitResolved("MfDestinationDown", within)
	w.waitResolved("MfMessagesRejected", within)
	var gauges map[string]string
	waitFor(t, "the queue gauges back to 0 on both nodes", within, func() bool {
		gauges = w.p.query(t, `sum by (instance) (mf_queue_depth) + on (instance) mf_lanes_blocked + on (instance) sum by (instance) (mf_queue_oldest_age_seconds)`)
		return maps.Equal(gauges, map[string]string{instance(n0)["instance"]: "0", instance(n1)["instance"]: "0"})
	})

	// The database cut from both nodes: no primary.
	px0.Cut()
	px1.Cut()
	w.waitFiring("MfNoPrimary", nil, within)
	w.waitFiring("MfStoreErrors", instance(n1), within)
	w.waitFiring("MfLeaderLostLease", instance(n0), within)
	// The fenced primary is a primary no more: it holds no port.
	if got := w.p.query(t, `mf_is_leader + on (instance) group_right mf_listener_bound`); !maps.Equal(got, map[string]string{instance(n0)["instance"]: "0", instance(n1)["instance"]: "0"}) {
		t.Fatalf("mf_is_leader + mf_listener_bound by instance is %v with the database cut; want 0 on both nodes", got)
	}
	if got := w.p.query(t, `mf_leader_term`); !maps.Equal(got, map[string]string{instance(n0)["instance"]: "0", instance(n1)["instance"]: "0"}) {
		t.Fatalf("mf_leader_term by instance is %v with the database cut; want 0 on both nodes (none leads a term)", got)
	}
	px0.Restore(t)
	px1.Restore(t)
	standby := c.nodes[1-c.waitForPrimary(-1)]
	w.waitResolved("MfNoPrimary", within)
	w.waitResolved("MfStoreErrors", within)

	// The standby down, then started again (the primary stays: no
	// election, which would be a third in the sped-up 30 minutes of
	// MfLeadershipFlapping).
	standby.kill()
	w.waitFiring("MfNodeDown", instance(standby), within)
	standby.launch()
	w.waitResolved("MfNodeDown", within)

	// Nothing else fired meanwhile.
	want := map[string]bool{}
	for _, s := range []string{"MfListenerNotBound", "MfConfigDrift", "MfMessagesRejected", "MfDestinationDown", "MfLanesBlocked", "MfBacklogStuck",
		"MfNoPrimary", "MfStoreErrors", "MfLeaderLostLease", "MfNodeDown"} {
		want[s] = true
	}
	var other []string
	for s := range w.seen {
		if !want[s[:strings.Index(s, "{")]] {
			other = append(other, s)
		}
	}
	sort.Strings(other)
	if len(other) > 0 {
		t.Fatalf("alerts fired that none of the conditions made: %v (all seen: %v)", other, w.seen)
	}
	t.Logf("alerts seen firing: %v", w.seen)
}

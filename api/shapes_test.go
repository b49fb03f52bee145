package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
)

// The shapes of reference 000, field for field (names, JSON types, nulls).
var (
	statusShape = map[string]string{"node_id": "string", "clustered": "bool", "is_leader": "bool", "role": "string", "config_version": "number"}
	nodesShape  = map[string]string{"nodes": "array", "leader_node_id": "string", "lease_owner": "string", "lease_expires_at": "null"}
	// A single node has no heartbeat history: started_at and last_seen are null.
	singleNodeEntry = map[string]string{"node_id": "string", "host": "string", "pid": "number", "status": "string",
		"started_at": "null", "last_seen": "null", "is_leader": "bool"}
)

func TestSingleNodeClusterEndpoints(t *testing.T) {
	v := start(t, fileOutbound)
	code, body := v.call(t, "GET", "/cluster/status", "viewer")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	st := enginetest.JSONShape(t, "/cluster/status", body, statusShape, "term")
	if st["clustered"] != false || st["is_leader"] != true || st["role"] != "single-node" || st["config_version"] != 0.0 {
		t.Fatalf("single-node status: %s", body)
	}
	_, body = v.call(t, "GET", "/cluster/nodes", "viewer")
	nodes := enginetest.JSONShape(t, "/cluster/nodes", body, nodesShape)
	list := nodes["nodes"].([]any)
	if len(list) != 1 {
		t.Fatalf("single-node nodes: %s", body)
	}
	entry, _ := jsonOf(list[0])
	self := enginetest.JSONShape(t, "/cluster/nodes entry", entry, singleNodeEntry)
	if self["node_id"] != st["node_id"] || nodes["leader_node_id"] != st["node_id"] || nodes["lease_owner"] != st["node_id"] ||
		self["status"] != "active" || self["is_leader"] != true || self["pid"] != float64(os.Getpid()) {
		t.Fatalf("single-node nodes: %s (status %v)", body, st)
	}
}

// scrape gets /metrics as a viewer and parses it as Prometheus's own
// parser does; it returns the families and the text.
func (v *env) scrape(t *testing.T) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	code, body := v.call(t, "GET", "/metrics", "viewer")
	if code != http.StatusOK {
		t.Fatalf("metrics %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	return families, body
}

// Every name of DESIGN §9 is in a scrape that a Prometheus text parser
// accepts; with promtool on the PATH (CI installs it), so does promtool.
func TestMetricsParseAndCarryEveryName(t *testing.T) {
	v := start(t, fileOutbound)
	enginetest.Dial(t, v.listen).Send(enginetest.ADT("M1", "P1"))
	families, body := v.scrape(t)
	for _, name := range []string{
		"mf_messages_received_total", "mf_messages_rejected_total", "mf_ack_duration_seconds", "mf_deliveries_total",
		"mf_delivery_duration_seconds", "mf_queue_depth", "mf_lanes_blocked", "mf_is_leader", "mf_leader_term",
		"mf_lease_renew_duration_seconds", "mf_leadership_changes_total", "mf_ingest_batch_size", "mf_store_errors_total",
		"mf_connections_refused_total", // README lists it: an alert on it must find a series before the first refusal
		"mf_messages_unrouted_total",   // likewise
		"mf_config_drift",              // likewise (0 on a single node)
		"mf_queue_oldest_age_seconds",  // likewise (0 with an empty queue)
		"mf_queue_dead",                // likewise (0 with none set aside)
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if _, ok := families[name]; !ok {
			t.Errorf("no %s in the scrape", name)
		}
	}
	if f := families["mf_is_leader"]; f == nil || f.Metric[0].GetGauge().GetValue() != 1 {
		t.Errorf("mf_is_leader: %v", f)
	}
	if f := families["mf_config_drift"]; f == nil || f.GetHelp() == "" || f.Metric[0].GetGauge().GetValue() != 0 {
		t.Errorf("mf_config_drift, want a gauge at 0 with its HELP: %v", f)
	}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "mf_") {
			continue // Go runtime and process metrics carry their own labels
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if n := l.GetName(); n != "inbound" && n != "destination" && n != "result" && n != "reason" && n != "op" && n != "le" && n != "vmrange" {
					t.Errorf("%s has a label %q outside the bounded set", f.GetName(), n)
				}
			}
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("promtool is not installed (CI=true: .ci/run installs Debian's prometheus package)")
		}
		t.Skip("promtool not installed (Debian package prometheus); the parser check above ran")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// A destination the start-up config did not have (a config reload added it)
// gets its mf_queue_depth series at the first scrape that finds rows for
// it; the config's own destinations report 0 without any.
func TestQueueDepthOfADestinationAddedLater(t *testing.T) {
	v := start(t, fileOutbound)
	v.ingestFor(t, "added_by_reload", 3)
	if got := metricValue(t, v, `mf_queue_depth{destination="added_by_reload"}`); got != "3" {
		t.Errorf("mf_queue_depth of the added destination = %s, want 3", got)
	}
	if got := metricValue(t, v, `mf_queue_depth{destination="emr"}`); got != "0" {
		t.Errorf("mf_queue_depth of the configured destination = %s, want 0", got)
	}
}

// An inbound's or an outbound's name is the operator's, and may hold a
// no-break space, a quote or a backslash (a control character, a tab say,
// the config refuses). Written into a label with Go's %q they became
// escapes such as \u00a0 that no Prometheus parser accepts: one such name
// failed every scrape. Each name must come back exactly as configured.
func TestMetricLabelsCarryAnyName(t *testing.T) {
	inbound, outbound := "adt in \u00a0\"east\"", `emr\west`
	listen := enginetest.FreeAddr(t)
	v := startWith(t, listen, `
[[inbound]]
name = "adt in \u00a0\"east\""
type = "mllp"
listen = "`+listen+`"

[[outbound]]
name = "emr\\west"
type = "file"
directory = "{{dir}}/out"

[[route]]
from = "adt in \u00a0\"east\""
to = ["emr\\west"]
lane_key = "PID-3.1"
`)
	if c := v.e.Config; c.Inbound[0].Name != inbound || c.Outbound[0].Name != outbound {
		t.Fatalf("the config's names are %q and %q", c.Inbound[0].Name, c.Outbound[0].Name)
	}
	enginetest.Dial(t, listen).Send(enginetest.ADT("M1", "P1"))
	families, _ := v.scrape(t)
	has := func(family, label, value string) bool {
		for _, m := range families[family].GetMetric() {
			for _, l := range m.Label {
				if l.GetName() == label && l.GetValue() == value {
					return true
				}
			}
		}
		return false
	}
	for _, c := range []struct{ family, label, value string }{
		{"mf_messages_received_total", "inbound", inbound},
		{"mf_ack_duration_seconds", "inbound", inbound},
		{"mf_deliveries_total", "destination", outbound},
		{"mf_queue_depth", "destination", outbound},
	} {
		if !has(c.family, c.label, c.value) {
			t.Errorf("no %s with %s=%q", c.family, c.label, c.value)
		}
	}
}

// A metric counted by a reason or a result says in its HELP which values it
// takes, and names every one a scrape shows: an alert is written from the
// HELP (or the README), and a value missing there is one nobody alerts on.
func TestMetricHelpNamesEveryReasonAndResult(t *testing.T) {
	v := start(t, fileOutbound)
	families, _ := v.scrape(t)
	helpNamesEveryReasonAndResult(t, families)
}

func helpNamesEveryReasonAndResult(t *testing.T, families map[string]*dto.MetricFamily) {
	t.Helper()
	for name, f := range families {
		if !strings.HasPrefix(name, "mf_") {
			continue
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				n := l.GetName()
				if n != "reason" && n != "result" {
					continue
				}
				_, values, ok := strings.Cut(f.GetHelp(), "by "+n+": ")
				if !ok || !slices.Contains(strings.FieldsFunc(values, func(r rune) bool { return r == ',' || r == ' ' || r == '.' }), l.GetValue()) {
					t.Errorf("%s{%s=%q}: its HELP does not list %q after \"by %s: \": %q", name, n, l.GetValue(), l.GetValue(), n, f.GetHelp())
				}
			}
		}
	}
}

// An engine with a mutual TLS inbound that checks a CRL (client_crl)
// exports its handshake failures and its CRL's next update too: each has a
// HELP that names every reason, and the README names it.
func TestATLSInboundsSeriesHaveTheirHelpAndAreInTheReadme(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	now := time.Now()
	crl := p.WriteCRL(t, filepath.Join(dir, "ca.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(24 * time.Hour)})
	listen := enginetest.FreeAddr(t)
	v := startWith(t, listen, `
[[inbound]]
name = "lab_in"
type = "mllp"
listen = "`+listen+`"
tls_cert = "`+p.ServerCert+`"
tls_key = "`+p.ServerKey+`"
client_ca = "`+p.CAFile+`"
client_crl = ["`+crl+`"]
`+fileOutbound+`
[[route]]
from = "lab_in"
to = ["emr"]
`)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var families map[string]*dto.MetricFamily
	enginetest.WaitFor(t, "the CRL's series", 10*time.Second, func() bool {
		families, _ = v.scrape(t)
		return families["mf_tls_crl_next_update_timestamp_seconds"] != nil
	})
	helpNamesEveryReasonAndResult(t, families)
	for _, name := range []string{"mf_tls_handshakes_failed_total", "mf_tls_crl_next_update_timestamp_seconds"} {
		f := families[name]
		if f == nil {
			t.Errorf("no %s in the scrape", name)
			continue
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP text", name)
		}
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("README.md does not name the metric `%s`", name)
		}
	}
}

// Every series of the engine's own (mf_) is named in the README, which is
// the operators' list to alert on: one the code exports and the README
// leaves out is one nobody knows to watch.
func TestTheReadmeNamesEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	v := start(t, fileOutbound)
	families, _ := v.scrape(t)
	for name := range families {
		if strings.HasPrefix(name, "mf_") && !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("README.md does not name the metric `%s`", name)
		}
	}
}

// Every op of mf_store_errors_total has its series at 0 from the start. A
// series born at 1 by its first failure is one that increase() and rate()
// cannot see grow until a second one: a single failed lease renewal, claim
// or purge, which README's alert on this counter is for, went unseen.
func TestEveryStoreErrorSeriesStartsAtZero(t *testing.T) {
	v := start(t, fileOutbound)
	families, _ := v.scrape(t)
	zero := map[string]bool{}
	for _, m := range families["mf_store_errors_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "op" {
				zero[l.GetValue()] = true
			}
		}
	}
	for _, op := range []string{
		"message_ingest", "metrics_queue", // listeners, api
		"claim", "advance", "complete", "retry", "hold", "dead", "give back", "release own", "queue_lanes", // lanes
		"queue_reclaim_expired", "message_purge", "queue_recover_foreign", "queue_relane", // actors
		"lease_elect", "lease_renew", "node_heartbeat", "config_version_read", // leadership
	} {
		if !zero[op] {
			t.Errorf(`no mf_store_errors_total{op=%q} in a scrape before any failure`, op)
		}
	}
}

// The operator endpoints' answers keep their shape at the edges a client
// meets first: no lane at all is "lanes": [], a message with no delivery
// (unrouted) has "queue": [], never null (a client iterates them); an
// action on a queue row that does not exist is 404, as GET /messages of a
// missing id is; an action done answers {"id": ..., "action": ...}.
func TestOperatorAnswersAtTheEdges(t *testing.T) {
	v := start(t, fileOutbound)
	if code, body := v.call(t, "GET", "/lanes", "viewer"); code != http.StatusOK || strings.TrimSpace(string(body)) != `{"lanes":[]}` {
		t.Fatalf("GET /lanes with no lane: %d %s; want 200 {\"lanes\":[]}", code, body)
	}
	res, err := v.e.Store.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: []storage.NewMessage{
		{Inbound: "adt_in", ControlID: "U1", Payload: []byte(enginetest.ADT("U1", "P1")), Status: storage.MessageUnrouted},
	}})
	if err != nil {
		t.Fatal(err)
	}
	code, body := v.call(t, "GET", fmt.Sprintf("/messages/%d", res[0].MessageID), "operator")
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil || code != http.StatusOK {
		t.Fatalf("GET /messages of an unrouted message: %d %v", code, err)
	}
	if q, ok := m["queue"].([]any); !ok || len(q) != 0 {
		t.Fatalf("GET /messages of an unrouted message: queue %#v; want []", m["queue"])
	}
	for _, action := range []string{"retry", "skip"} {
		code, body := v.call(t, "POST", "/queue/999999/"+action, "operator")
		var e struct{ Error string }
		if code != http.StatusNotFound || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, "no queue row 999999") {
			t.Errorf("POST /queue/999999/%s (no such row): %d %s; want 404 saying there is no queue row 999999", action, code, body)
		}
	}
	rows := v.ingest(t, 1)
	code, body = v.call(t, "POST", fmt.Sprintf("/queue/%d/retry", rows[0]), "operator")
	if want := fmt.Sprintf(`{"action":"retry","id":%d}`, rows[0]); code != http.StatusOK || strings.TrimSpace(string(body)) != want {
		t.Errorf("POST /queue/%d/retry: %d %s; want 200 %s", rows[0], code, body, want)
	}
}

// agedStore is a store whose queue has rows of given ages.
type agedStore struct {
	storage.Store
	stats []storage.QueueStat
}

func (s agedStore) QueueStats(context.Context) ([]storage.QueueStat, error) { return s.stats, nil }

// OutboundHolds: no outbound is held.
func (s agedStore) OutboundHolds(context.Context) ([]storage.OutboundHeld, error) { return nil, nil }

// mf_queue_oldest_age_seconds gives, per destination, how long its oldest
// row pending or in flight has waited (dead rows wait for no one): the
// figure an operator alerts on ("a message has waited 15 minutes"), which
// no metric gave; GET /lanes has it one lane at a time. mf_queue_dead gives
// the rows set aside as dead, which wait for an operator's resend: only a
// counter's increase (mf_deliveries_total{result="dead"}) told of them, and
// an alert on it ended 15 minutes later with the rows still there.
func TestQueueOldestAgeAndDeadRowsAreExported(t *testing.T) {
	cfg := &config.Config{API: config.API{MetricsPublic: true}, Outbound: []config.Outbound{{Name: "emr"}}}
	s := api.New(api.Options{Config: cfg, Log: zerolog.Nop(), Store: agedStore{stats: []storage.QueueStat{
		{Destination: "lab", Status: storage.QueuePending, Count: 2, OldestAge: 90 * time.Second},
		{Destination: "lab", Status: storage.QueueInflight, Count: 1, OldestAge: 300500 * time.Millisecond},
		{Destination: "lab", Status: "dead", Count: 1},
		{Destination: "ris", Status: "dead", Count: 4},
	}}})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	got := map[string]string{}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if name, value, ok := strings.Cut(line, " "); ok && (strings.HasPrefix(name, "mf_queue_oldest_age_seconds{") || strings.HasPrefix(name, "mf_queue_dead{")) {
			got[name] = value
		}
	}
	want := map[string]string{
		`mf_queue_oldest_age_seconds{destination="lab"}`: "300.5",
		`mf_queue_oldest_age_seconds{destination="ris"}`: "0",
		`mf_queue_oldest_age_seconds{destination="emr"}`: "0",
		`mf_queue_dead{destination="lab"}`:               "1",
		`mf_queue_dead{destination="ris"}`:               "4",
		`mf_queue_dead{destination="emr"}`:               "0",
	}
	for k, v := range want { // other tests' destinations have series too
		if got[k] != v {
			t.Errorf("%s = %q; want %s (all: %v)", k, got[k], v, got)
		}
	}
}

package api_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

func metricValue(t *testing.T, v *env, series string) string {
	t.Helper()
	_, body := v.call(t, "GET", "/metrics", "viewer")
	for _, line := range strings.Split(string(body), "\n") {
		if name, value, ok := strings.Cut(line, " "); ok && name == series {
			return value
		}
	}
	t.Fatalf("no %s in the scrape", series)
	return ""
}

// A destination rejects a message (AR-like, permanent) with on_exhausted =
// "block": /lanes and mf_lanes_blocked show the blocked lane; a viewer sees
// why (the status code) but not the destination's words, which quote the
// patient, and may not skip it; an operator sees both, and a skip moves the
// lane on.
func TestBlockedLaneShownAndSkipped(t *testing.T) {
	dest := enginetest.StartHTTPDestination(t)
	v := start(t, `
[[outbound]]
name = "emr"
type = "http"
url = "`+dest.URL+`"
on_exhausted = "block"
`)
	cl := enginetest.Dial(t, v.listen)
	cl.Send(strings.Replace(enginetest.ADT("B1", "P1"), "DOE^JANE", "POISON", 1))
	cl.Send(enginetest.ADT("B2", "P1"))

	type lanes struct{ Lanes []api.Lane }
	var blocked api.Lane
	enginetest.WaitFor(t, "the lane to show blocked", 10*time.Second, func() bool {
		_, body := v.call(t, "GET", "/lanes", "viewer")
		var l lanes
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		for _, x := range l.Lanes {
			if x.Blocked {
				blocked = x
				return true
			}
		}
		return false
	})
	if blocked.Depth != 2 || blocked.Destination != "emr" || blocked.Attempts < 1 || !strings.Contains(blocked.LastError, "400") || strings.Contains(blocked.Lane, "P1") ||
		strings.Contains(blocked.LastError, enginetest.RejectedPatient) {
		t.Fatalf("blocked lane as a viewer sees it: %+v (want depth 2 and the attempts made; the lane key must be hashed and the destination's words left out for a viewer)", blocked)
	}
	_, body := v.call(t, "GET", "/lanes", "operator")
	var asOperator lanes
	if err := json.Unmarshal(body, &asOperator); err != nil || len(asOperator.Lanes) != 1 ||
		!strings.Contains(asOperator.Lanes[0].LastError, "400") || !strings.Contains(asOperator.Lanes[0].LastError, "Unknown patient "+enginetest.RejectedPatient) {
		t.Fatalf("GET /lanes as an operator: %s; want the status code and the destination's words", body)
	}
	// GET /messages/{id} (MESSAGE_READ) shows the destination's words too:
	// the place they are kept for the operator when log_payloads is off.
	_, body = v.call(t, "GET", "/messages/1", "operator")
	var held api.Message
	if err := json.Unmarshal(body, &held); err != nil || len(held.Queue) != 1 ||
		!strings.Contains(held.Queue[0].LastError, "400") || !strings.Contains(held.Queue[0].LastError, "Unknown patient "+enginetest.RejectedPatient) {
		t.Fatalf("GET /messages/1 of the blocked head: queue %+v (%v); want its row's last_error with the status code and the destination's words", held.Queue, err)
	}
	if got := metricValue(t, v, "mf_lanes_blocked"); got != "1" {
		t.Fatalf("mf_lanes_blocked = %s, want 1", got)
	}
	path := fmt.Sprintf("/queue/%d/skip", blocked.HeadID)
	if code, _ := v.call(t, "POST", path, "viewer"); code != http.StatusForbidden {
		t.Fatalf("a viewer's skip: %d, want 403", code)
	}
	if len(dest.Received()) != 0 {
		t.Fatalf("delivered %v while blocked", dest.Received())
	}
	if code, body := v.call(t, "POST", path, "operator"); code != http.StatusOK {
		t.Fatalf("an operator's skip: %d %s", code, body)
	}
	enginetest.WaitFor(t, "the lane to move on to B2", 10*time.Second, func() bool { return strings.Join(dest.Received(), ",") == "B2" })
	if got := metricValue(t, v, "mf_lanes_blocked"); got != "0" {
		t.Fatalf("mf_lanes_blocked = %s after the skip, want 0", got)
	}
	_, body = v.call(t, "GET", fmt.Sprintf("/messages/%d", 1), "operator")
	var m api.Message
	if err := json.Unmarshal(body, &m); err != nil || len(m.Queue) != 1 || m.Queue[0].Status != "dead" ||
		!strings.Contains(m.Queue[0].LastError, "skipped by operator") || !strings.Contains(m.Payload, "POISON") {
		t.Fatalf("the skipped message: %s", body)
	}
}

// /ready is 503 with a reason while the store is unreachable (a cut network
// between the node and PostgreSQL), and 200 again once it is back.
func TestReadyFollowsTheStore(t *testing.T) {
	url := pgtest.NewSchema(t)
	px := enginetest.StartProxy(t, enginetest.HostOf(t, url))
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Options{URL: px.Via(t, url), PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, _ := config.Parse([]byte(""), "empty.toml")
	srv := httptest.NewServer(api.New(api.Options{Config: cfg, Store: st, Log: zerolog.Nop()}).Handler())
	t.Cleanup(srv.Close)
	ready := func() (int, map[string]string) {
		resp, err := http.Get(srv.URL + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]string
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	if code, body := ready(); code != http.StatusOK {
		t.Fatalf("ready before the cut: %d %v", code, body)
	}
	px.Cut()
	code, body := ready()
	if code != http.StatusServiceUnavailable || body["reason"] == "" || body["error"] != body["reason"] {
		t.Fatalf("ready with the store cut off: %d %v; want 503 with a reason, also as the error of every answer that is not 2xx", code, body)
	}
	t.Logf("while cut off: %d %v", code, body)
	px.Restore(t)
	enginetest.WaitFor(t, "ready again", 10*time.Second, func() bool { c, _ := ready(); return c == http.StatusOK })
}

// tlsAPIConfig is a config whose API listens on addr with a server
// certificate of a fresh test PKI, which it returns too.
func tlsAPIConfig(t *testing.T, addr string) (*config.Config, *enginetest.PKI) {
	t.Helper()
	p := enginetest.NewPKI(t, t.TempDir())
	cfg, err := config.Parse([]byte(`
[api]
listen = "`+addr+`"
tls_cert = "`+p.ServerCert+`"
tls_key = "`+p.ServerKey+`"
`), "tls.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg, p
}

// With tls_cert and tls_key the API serves HTTPS only.
func TestAPIOverTLS(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	cfg, p := tlsAPIConfig(t, addr)
	s := api.New(api.Options{Config: cfg, Log: zerolog.Nop()})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS12}}, Timeout: 5 * time.Second}
	resp, err := client.Get("https://" + addr + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET https /health: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/health"); err == nil && resp.StatusCode == http.StatusOK {
		t.Fatal("plain HTTP got 200 from a TLS API")
	}
}

// A key pair that cannot be loaded when the API starts (the files changed
// since the config was checked) fails the start, with the port not bound.
// It was loaded in the serving goroutine: "API listening" was logged, and
// the port accepted connections that nobody ever answered.
func TestAPIWhoseKeyPairCannotBeLoadedDoesNotStart(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	cfg, p := tlsAPIConfig(t, addr)
	if err := os.WriteFile(p.ServerKey, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Options{Config: cfg, Log: zerolog.Nop()})
	err := s.Start()
	if err == nil {
		t.Cleanup(func() { s.Shutdown(context.Background()) })
		t.Fatal("the API started with a key it cannot load")
	}
	if !strings.Contains(err.Error(), "tls_key") {
		t.Fatalf("the error does not name tls_key: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the port is bound")
	}
}

// reclaimedStore answers every retry and skip as a store does when the row
// was in flight as the action's update looked and was re-pended (its lease
// reclaimed) before the action read its status.
type reclaimedStore struct{ storage.Store }

func (reclaimedStore) QueueRelease(ctx context.Context, p storage.QueueReleaseParams) (storage.QueueActed, error) {
	return storage.QueueActed{}, storage.NotPending{ID: p.ID, Status: storage.QueuePending}
}

func (reclaimedStore) QueueSkip(ctx context.Context, p storage.QueueSkipParams) (storage.QueueActed, error) {
	return storage.QueueActed{}, storage.NotPending{ID: p.ID, Status: storage.QueuePending}
}

// A retry or skip of a row that is not pending is still a 409 {"error"},
// and the error says what the row is: in flight (being delivered, so wait),
// or finished, done or dead (nothing left to retry). Before, each said "in
// flight or finished", and the operator could not tell which.
func TestRetryOrSkipOfARowNotPendingSaysWhatItIs(t *testing.T) {
	v := start(t, fileOutbound)
	rows := v.ingest(t, 2) // a lane whose destination is unknown: only this test claims it
	ctx := context.Background()
	c, err := v.e.Store.QueueClaimNext(ctx, storage.QueueClaimNextParams{Lane: "nowhere/P9", Owner: "operator-test", LeaseTTL: time.Hour})
	if err != nil || c.Row.ID != rows[0] {
		t.Fatalf("claim of row %d: %+v, %v", rows[0], c.Row, err)
	}
	refused := func(via *env, action string, id int64, want string) {
		t.Helper()
		code, body := via.call(t, "POST", fmt.Sprintf("/queue/%d/%s", id, action), "operator")
		var e struct{ Error string }
		if code != http.StatusConflict || json.Unmarshal(body, &e) != nil || e.Error != want {
			t.Errorf("%s of row %d: %d %s; want 409 {\"error\": %q}", action, id, code, body, want)
		}
	}
	const only = ": only a pending row can be retried or skipped"
	for _, action := range []string{"retry", "skip"} {
		refused(v, action, rows[0], fmt.Sprintf("queue row %d is in flight (being delivered)", rows[0])+only)
	}
	if err := v.e.Store.QueueComplete(ctx, storage.QueueCompleteParams{Claim: c.Claim()}); err != nil {
		t.Fatal(err)
	}
	if code, body := v.call(t, "POST", fmt.Sprintf("/queue/%d/skip", rows[1]), "operator"); code != http.StatusOK {
		t.Fatalf("skip of pending row %d: %d %s", rows[1], code, body)
	}
	for _, action := range []string{"retry", "skip"} {
		refused(v, action, rows[0], fmt.Sprintf("queue row %d is done (finished)", rows[0])+only)
		refused(v, action, rows[1], fmt.Sprintf("queue row %d is dead (finished)", rows[1])+only)
	}

	s := api.New(api.Options{Config: v.e.Config, Store: reclaimedStore{v.e.Store}, Status: v.e.Status, Log: zerolog.New(zerolog.NewTestWriter(t))})
	reclaimed := &env{e: v.e, srv: httptest.NewServer(s.Handler())}
	t.Cleanup(reclaimed.srv.Close)
	refused(reclaimed, "retry", 12, "queue row 12 was in flight and is pending again now: try again")
	refused(reclaimed, "skip", 12, "queue row 12 was in flight, or behind its lane's head, as the skip ran and is pending at its lane's head now: try again")
}

// A skip sets aside only its lane's head. The audit's case: three rows queued
// in one lane, nothing blocked, a skip of the second answered 200 and the
// row was dead ("skipped by operator operator-token"), a good message
// dropped by a mistyped id. It is a 409 naming the head, and the row stays
// pending; the head is skipped (200), and then the next row, now the head.
func TestSkipOfARowBehindItsLaneHeadIsRefused(t *testing.T) {
	v := start(t, fileOutbound)
	rows := v.ingest(t, 3) // a lane whose destination is unknown: its rows stay pending
	ctx := context.Background()
	skip := func(id int64) (int, string) {
		t.Helper()
		code, body := v.call(t, "POST", fmt.Sprintf("/queue/%d/skip", id), "operator")
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		if code == http.StatusOK {
			return code, string(body)
		}
		return code, e.Error
	}
	notHead := func(id, head int64) string {
		return fmt.Sprintf("queue row %d is pending but is not the head of its lane: row %d is ahead of it; "+
			"skip acts on a lane's head (deliver or skip the rows ahead first)", id, head)
	}
	lane := func() storage.LaneSummary {
		t.Helper()
		lanes, err := v.e.Store.QueueLanes(ctx, storage.QueueLanesParams{})
		if err != nil || len(lanes) != 1 {
			t.Fatalf("lanes: %+v, %v; want the one lane", lanes, err)
		}
		return lanes[0]
	}
	for _, id := range rows[1:] {
		if code, msg := skip(id); code != http.StatusConflict || msg != notHead(id, rows[0]) {
			t.Errorf("skip of row %d behind head %d: %d %q; want 409 %q", id, rows[0], code, msg, notHead(id, rows[0]))
		}
	}
	if l := lane(); l.Depth != 3 || l.Head.ID != rows[0] {
		t.Fatalf("after the refused skips: depth %d head %d; want the lane's 3 rows still pending, head %d", l.Depth, l.Head.ID, rows[0])
	}
	if code, body := skip(rows[0]); code != http.StatusOK {
		t.Fatalf("skip of the head %d: %d %s; want 200", rows[0], code, body)
	}
	if code, msg := skip(rows[2]); code != http.StatusConflict || msg != notHead(rows[2], rows[1]) {
		t.Errorf("skip of row %d behind head %d: %d %q; want 409 %q", rows[2], rows[1], code, msg, notHead(rows[2], rows[1]))
	}
	if l := lane(); l.Depth != 2 || l.Head.ID != rows[1] {
		t.Fatalf("after the head's skip: depth %d head %d; want 2 rows, head %d", l.Depth, l.Head.ID, rows[1])
	}
	for _, id := range rows[1:] {
		if code, body := skip(id); code != http.StatusOK {
			t.Fatalf("skip of row %d, its lane's head now: %d %s; want 200", id, code, body)
		}
	}
	if lanes, err := v.e.Store.QueueLanes(ctx, storage.QueueLanesParams{}); err != nil || len(lanes) != 0 {
		t.Fatalf("lanes after skipping every row: %+v, %v; want none", lanes, err)
	}
}

// The API's certificate renewed on disk (certbot, a PKI agent) is what the
// next handshake presents, without a restart, as a listener's is: it was
// read at start only, and served until it expired, when every monitoring
// client and operator tool was refused.
func TestARenewedAPICertificateIsServedWithoutARestart(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	now := time.Now().Truncate(time.Second)
	cert, key := p.ServerCertValid(t, dir, "api", now.Add(-time.Hour), now.Add(20*24*time.Hour))
	cfg, err := config.Parse([]byte("[api]\nlisten = \""+addr+"\"\ntls_cert = \""+cert+"\"\ntls_key = \""+key+"\"\n"), "tls.toml")
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(api.Options{Config: cfg, Log: zerolog.Nop()})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	served := func() *x509.Certificate {
		t.Helper()
		resp, err := client.Get("https://" + addr + "/health")
		if err != nil {
			t.Fatalf("GET https /health: %v", err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0]
	}
	first := served()
	p.ServerCertValid(t, dir, "api", now.Add(-time.Hour), now.Add(90*24*time.Hour))
	var got *x509.Certificate
	enginetest.WaitFor(t, "a handshake presenting the renewed certificate", 10*time.Second, func() bool {
		got = served()
		return got.SerialNumber.Cmp(first.SerialNumber) != 0
	})
	if !got.NotAfter.Equal(now.Add(90 * 24 * time.Hour)) {
		t.Fatalf("the certificate served after the renewal expires %v; want the renewed one's %v", got.NotAfter, now.Add(90*24*time.Hour))
	}
}

// A retry or skip is told to the node's lane manager (Options.QueueChanged)
// once the store has made it, and before the answer; a manager that does
// not answer (stopping) fails neither: the action is made and answered 200,
// and a WARN line says so with the queue id and action alone (no lane: its
// key may be a patient id).
func TestARetryOrSkipIsToldToTheLanesAndAFailedTellIsOnlyLogged(t *testing.T) {
	v := start(t, fileOutbound)
	rows := v.ingest(t, 2) // lane nowhere/P9: no lane actor claims it
	logs := &enginetest.LogBuffer{}
	type told struct {
		status string
		held   bool
	}
	var tells []told
	s := api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: v.e.Status, Log: zerolog.New(logs),
		QueueChanged: func(ctx context.Context) error {
			m, err := v.e.Store.MessageRead(ctx, 1)
			if err != nil {
				t.Error(err)
			}
			tells = append(tells, told{m.Queue[0].Status, m.Queue[0].Held})
			return errors.New("the lane manager did not answer")
		}})
	failing := &env{e: v.e, srv: httptest.NewServer(s.Handler())}
	t.Cleanup(failing.srv.Close)
	for _, action := range []string{"retry", "skip"} {
		if code, body := failing.call(t, "POST", fmt.Sprintf("/queue/%d/%s", rows[0], action), "operator"); code != http.StatusOK {
			t.Fatalf("%s of row %d with a lane manager that does not answer: %d %s; want 200", action, rows[0], code, body)
		}
	}
	if want := []told{{storage.QueuePending, false}, {storage.QueueDead, false}}; !slices.Equal(tells, want) {
		t.Fatalf("the lane manager was told with row %d as %+v; want once after the retry (pending) and once after the skip (dead)", rows[0], tells)
	}
	out := logs.String()
	if strings.Count(out, `"level":"warn"`) != 2 || !strings.Contains(out, fmt.Sprintf(`"queue_id":%d`, rows[0])) ||
		!strings.Contains(out, "the lane manager was not told") || strings.Contains(out, "P9") {
		t.Fatalf("log:\n%s\nwant a WARN per action naming the queue id and no lane key", out)
	}
	// The audit line of each action names the row's message and destination:
	// the queue id alone led nowhere once the row was purged.
	for _, action := range []string{"retry", "skip"} {
		want := fmt.Sprintf(`"queue_id":%d,"message_id":1,"destination":"nowhere","action":%q,"token":"operator-token"`, rows[0], action)
		if !strings.Contains(out, want) {
			t.Fatalf("log:\n%s\nwant the %s's audit line with %s", out, action, want)
		}
	}
}

package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// holdShape is the answer of POST /outbounds/{name}/hold; a release
// answers "since": null.
var (
	holdShape    = map[string]string{"outbound": "string", "held": "bool", "since": "number"}
	releaseShape = map[string]string{"outbound": "string", "held": "bool", "since": "null"}
)

// lanesOf is GET /lanes as role sees it.
func lanesOf(t *testing.T, v *env, role string) []api.Lane {
	t.Helper()
	code, body := v.call(t, "GET", "/lanes", role)
	var l struct{ Lanes []api.Lane }
	if err := json.Unmarshal(body, &l); code != http.StatusOK || err != nil {
		t.Fatalf("GET /lanes: %d %s", code, body)
	}
	return l.Lanes
}

// An operator holds an outbound: messages for it are still acknowledged
// AA, stored and queued, and none is sent; GET /lanes shows its lane held
// (not blocked), mf_outbound_held is 1 and mf_lanes_blocked stays 0. The
// release delivers them in order. Both are idempotent; a viewer may do
// neither, and an outbound the config does not have is 404.
func TestAHeldOutboundQueuesAndDeliversInOrderOnRelease(t *testing.T) {
	dest := enginetest.StartHTTPDestination(t)
	v := start(t, `
[[outbound]]
name = "emr"
type = "http"
url = "`+dest.URL+`"
`)
	for _, c := range []struct {
		path, role string
		code       int
	}{
		{"/outbounds/emr/hold", "", http.StatusUnauthorized},
		{"/outbounds/emr/hold", "viewer", http.StatusForbidden},
		{"/outbounds/emr/release", "viewer", http.StatusForbidden},
		{"/outbounds/nowhere/hold", "operator", http.StatusNotFound},
		{"/outbounds/nowhere/release", "operator", http.StatusNotFound},
	} {
		if code, body := v.call(t, "POST", c.path, c.role); code != c.code {
			t.Fatalf("POST %s as %q: %d %s, want %d", c.path, c.role, code, body, c.code)
		}
	}
	if code, body := v.call(t, "GET", "/outbounds/emr/hold", "operator"); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET of a hold: %d %s, want 405", code, body)
	}
	if got := metricValue(t, v, `mf_outbound_held{destination="emr"}`); got != "0" {
		t.Fatalf("mf_outbound_held before any hold: %s, want 0", got)
	}

	code, body := v.call(t, "POST", "/outbounds/emr/hold", "operator")
	if code != http.StatusOK {
		t.Fatalf("hold: %d %s", code, body)
	}
	held := enginetest.JSONShape(t, "hold", body, holdShape)
	if held["outbound"] != "emr" || held["held"] != true {
		t.Fatalf("hold answered %s", body)
	}
	if _, again := v.call(t, "POST", "/outbounds/emr/hold", "operator"); enginetest.JSONShape(t, "hold again", again, holdShape)["since"] != held["since"] {
		t.Fatalf("holding a held outbound answered %s, want the first hold's since (%s)", again, body)
	}
	v.e.Store.ManagerCaughtUp(t)

	cl := enginetest.Dial(t, v.listen)
	for _, id := range []string{"H1", "H2", "H3"} {
		if ack := cl.Send(enginetest.ADT(id, "P1")); ack.Code != "AA" {
			t.Fatalf("%s answered %s while its outbound is held; want AA", id, ack.Code)
		}
	}
	v.e.Store.ManagerCaughtUp(t)
	if got := dest.Received(); len(got) != 0 {
		t.Fatalf("a held outbound was sent %v", got)
	}
	msgs := v.e.Messages(t)
	if len(msgs) != 3 {
		t.Fatalf("%d messages stored, want 3", len(msgs))
	}
	for _, m := range msgs {
		if len(m.Queue) != 1 || m.Queue[0].Status != storage.QueuePending || m.Queue[0].Attempts != 0 || m.Queue[0].Held {
			t.Fatalf("message %s of a held outbound: queue %+v, want one pending row, untried and not held", m.Message.ControlID, m.Queue)
		}
	}
	if ls := lanesOf(t, v, "viewer"); len(ls) != 1 || !ls[0].OutboundHeld || ls[0].Blocked || ls[0].Depth != 3 {
		t.Fatalf("GET /lanes of a held outbound: %+v, want one lane of depth 3, outbound_held and not blocked", ls)
	}
	if got := metricValue(t, v, `mf_outbound_held{destination="emr"}`); got != "1" {
		t.Fatalf("mf_outbound_held while held: %s, want 1", got)
	}
	if got := metricValue(t, v, "mf_lanes_blocked"); got != "0" {
		t.Fatalf("mf_lanes_blocked while the outbound is held: %s, want 0 (a held lane is not blocked)", got)
	}

	for range 2 { // the second changes nothing
		code, body = v.call(t, "POST", "/outbounds/emr/release", "operator")
		if r := enginetest.JSONShape(t, "release", body, releaseShape); code != http.StatusOK || r["outbound"] != "emr" || r["held"] != false {
			t.Fatalf("release: %d %s", code, body)
		}
	}
	enginetest.WaitFor(t, "the three messages delivered after the release", 20*time.Second, func() bool { return len(dest.Received()) == 3 })
	if got := dest.Received(); !slices.Equal(got, []string{"H1", "H2", "H3"}) {
		t.Fatalf("delivered %v after the release, want H1, H2, H3 in order", got)
	}
	if got := metricValue(t, v, `mf_outbound_held{destination="emr"}`); got != "0" {
		t.Fatalf("mf_outbound_held after the release: %s, want 0", got)
	}
	enginetest.WaitFor(t, "the lane to empty", 10*time.Second, func() bool { return len(lanesOf(t, v, "viewer")) == 0 })
}

// A hold is kept in the database: a node restarted while its outbound is
// held sends nothing of the queue it finds, nor of what arrives after,
// until it is released, then all of it in order.
func TestAHoldOutlivesARestart(t *testing.T) {
	dest := enginetest.StartHTTPDestination(t)
	dir, listen := t.TempDir(), enginetest.FreeAddr(t)
	cfg := tokenConfig() + `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "` + listen + `"

[[outbound]]
name = "emr"
type = "http"
url = "` + dest.URL + `"

[[route]]
from = "adt_in"
to = ["emr"]
`
	startAt := func() *env {
		e := enginetest.StartIn(t, dir, cfg)
		srv := httptest.NewServer(api.New(api.Options{Config: e.Config, Store: e.Store, Status: e.Status, Log: zerolog.New(zerolog.NewTestWriter(t))}).Handler())
		t.Cleanup(srv.Close)
		return &env{e: e, srv: srv, listen: listen}
	}
	v := startAt()
	if code, body := v.call(t, "POST", "/outbounds/emr/hold", "operator"); code != http.StatusOK {
		t.Fatalf("hold: %d %s", code, body)
	}
	v.e.Store.ManagerCaughtUp(t)
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("R1", "P1")); ack.Code != "AA" {
		t.Fatalf("R1 answered %s; want AA", ack.Code)
	}
	v.e.Shutdown(t)

	v = startAt()
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("R2", "P1")); ack.Code != "AA" {
		t.Fatalf("R2 answered %s after the restart; want AA", ack.Code)
	}
	v.e.Store.ManagerCaughtUp(t)
	if got := dest.Received(); len(got) != 0 {
		t.Fatalf("an outbound held before a restart was sent %v after it", got)
	}
	if _, body := v.call(t, "GET", "/lanes", "viewer"); !strings.Contains(string(body), `"outbound_held":true`) {
		t.Fatalf("GET /lanes after the restart: %s; want the lane shown with its outbound held", body)
	}
	if code, body := v.call(t, "POST", "/outbounds/emr/release", "operator"); code != http.StatusOK {
		t.Fatalf("release: %d %s", code, body)
	}
	enginetest.WaitFor(t, "both messages delivered after the release", 20*time.Second, func() bool { return len(dest.Received()) == 2 })
	if got := dest.Received(); !slices.Equal(got, []string{"R1", "R2"}) {
		t.Fatalf("delivered %v, want R1, R2 in order", got)
	}
}

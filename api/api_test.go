package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/rs/zerolog"
)

// The three tokens of the test config, one per role.
var tokens = map[string]string{"viewer": "tok-viewer", "operator": "tok-operator", "admin": "tok-admin"}

func tokenConfig() string {
	var b strings.Builder
	for role, tok := range tokens {
		sum := sha256.Sum256([]byte(tok))
		fmt.Fprintf(&b, "[[api.tokens]]\nname = %q\nrole = %q\nsha256 = %q\n\n", role+"-token", role, hex.EncodeToString(sum[:]))
	}
	return b.String()
}

// env is a single-node engine with its API served by httptest.
type env struct {
	e      *enginetest.Engine
	srv    *httptest.Server
	listen string
}

func start(t *testing.T, outbound string) *env {
	t.Helper()
	return startAPI(t, "", outbound)
}

// startAPI is start with apiKeys added to the [api] section.
func startAPI(t *testing.T, apiKeys, outbound string) *env {
	t.Helper()
	listen := enginetest.FreeAddr(t)
	return startWith(t, listen, apiKeys+`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "`+listen+`"
`+outbound+`
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "PID-3.1"
`)
}

// startWith starts an engine on cfg (with the test tokens), whose inbound
// listens on listen, and serves its API.
func startWith(t *testing.T, listen, cfg string) *env {
	t.Helper()
	e := enginetest.Start(t, tokenConfig()+cfg)
	s := api.New(api.Options{Config: e.Config, Store: e.Store, Status: e.Status, Log: zerolog.New(zerolog.NewTestWriter(t))})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &env{e: e, srv: srv, listen: listen}
}

const fileOutbound = `
[[outbound]]
name = "emr"
type = "file"
directory = "{{dir}}/out"
`

// call does one request with the role's token ("" for none) and returns
// the status and body.
func (v *env) call(t *testing.T, method, path, role string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, v.srv.URL+path, nil)
	if role != "" {
		req.Header.Set("Authorization", "Bearer "+tokens[role])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || path != "/metrics" {
		if !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s %s: content type %q", method, path, ct)
		}
	}
	return resp.StatusCode, body
}

// ingest stores n messages for lane nowhere/P9, a destination the config
// does not have (nothing delivers them: the lane's rows stay pending), and
// returns their queue ids.
func (v *env) ingest(t *testing.T, n int) []int64 {
	t.Helper()
	return v.ingestFor(t, "nowhere", n)
}

// ingestFor is ingest for lane dest/P9.
func (v *env) ingestFor(t *testing.T, dest string, n int) []int64 {
	t.Helper()
	res, err := v.e.Store.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: func() []storage.NewMessage {
		var ms []storage.NewMessage
		for i := 0; i < n; i++ {
			ms = append(ms, storage.NewMessage{Inbound: "adt_in", ControlID: fmt.Sprintf("X%d", i), Payload: []byte(enginetest.ADT("X", "P9")),
				Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: dest, Lane: dest + "/P9"}}})
		}
		return ms
	}()})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, r := range res {
		ids = append(ids, r.QueueIDs[0])
	}
	return ids
}

// Every path, with no token and with each role: 401, 403 or 200 as DESIGN §8
// says, and a JSON error body whenever it is not 200.
func TestPermissionsTable(t *testing.T) {
	v := start(t, fileOutbound)
	rows := v.ingest(t, 3) // a lane whose destination is unknown: its rows stay pending
	msgID := int64(1)
	type row struct {
		method, path string
		need         api.Permission // 0: open to all
	}
	paths := []row{
		{"GET", "/health", 0},
		{"GET", "/ready", 0},
		{"GET", "/cluster/status", api.MonitoringRead},
		{"GET", "/cluster/nodes", api.MonitoringRead},
		{"GET", "/metrics", api.MonitoringRead},
		{"GET", "/lanes", api.MonitoringRead},
		{"GET", fmt.Sprintf("/messages/%d", msgID), api.MessageRead},
		{"GET", "/messages?control_id=X0", api.MessageRead},
		{"POST", fmt.Sprintf("/queue/%d/retry", rows[0]), api.QueueWrite},
		{"POST", "/config/reload", api.ConfigWrite},
	}
	// Skips in lane order (a skip takes only its lane's head): the
	// operator's the first row, the admin's the second, now the head.
	skips := map[string]int64{"operator": rows[0], "admin": rows[1]}
	for _, p := range paths {
		for _, role := range []string{"", "viewer", "operator", "admin"} {
			want := http.StatusOK
			switch {
			case p.need == 0:
			case role == "":
				want = http.StatusUnauthorized
			case !api.HasPermission(role, p.need):
				want = http.StatusForbidden
			case p.path == "/config/reload":
				want = http.StatusConflict // a single node has nothing to reload
			}
			got, body := v.call(t, p.method, p.path, role)
			if got != want {
				t.Errorf("%s %s as %q: %d, want %d (%s)", p.method, p.path, role, got, want, body)
			}
			if got != http.StatusOK {
				var e struct{ Error string }
				if json.Unmarshal(body, &e) != nil || e.Error == "" {
					t.Errorf("%s %s as %q: error body %q is not {\"error\": ...}", p.method, p.path, role, body)
				}
			}
		}
	}
	// Skip, each permitted role on its own row.
	for _, role := range []string{"", "viewer", "operator", "admin"} {
		id := skips[role]
		if id == 0 {
			id = rows[2]
		}
		want := map[string]int{"": 401, "viewer": 403, "operator": 200, "admin": 200}[role]
		if got, body := v.call(t, "POST", fmt.Sprintf("/queue/%d/skip", id), role); got != want {
			t.Errorf("POST skip as %q: %d, want %d (%s)", role, got, want, body)
		}
	}
	// A wrong token is as good as none; an unknown path is a JSON 404.
	req, _ := http.NewRequest("GET", v.srv.URL+"/lanes", nil)
	req.Header.Set("Authorization", "Bearer not-a-token")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %v %v", resp.StatusCode, err)
	}
	if got, _ := v.call(t, "GET", "/nope", "admin"); got != http.StatusNotFound {
		t.Fatalf("unknown path: %d", got)
	}
	if got, _ := v.call(t, "POST", fmt.Sprintf("/queue/%d/skip", rows[1]), "operator"); got != http.StatusConflict {
		t.Fatalf("skip of a dead row: %d, want 409", got)
	}
	if got, _ := v.call(t, "GET", "/messages/999999", "operator"); got != http.StatusNotFound {
		t.Fatalf("a missing message: %d, want 404", got)
	}
}

// With [api] metrics_public = true, /metrics is served without a token (a
// Prometheus that holds none) and every other endpoint still needs one.
func TestMetricsPublicOpensOnlyMetrics(t *testing.T) {
	v := startAPI(t, "[api]\nmetrics_public = true\n", fileOutbound)
	if code, body := v.call(t, "GET", "/metrics", ""); code != http.StatusOK || !strings.Contains(string(body), "mf_is_leader ") {
		t.Fatalf("GET /metrics without a token, metrics_public = true: %d %.200s", code, body)
	}
	for _, path := range []string{"/cluster/status", "/cluster/nodes", "/lanes", "/messages/1"} {
		if code, body := v.call(t, "GET", path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token, metrics_public = true: %d %s, want 401", path, code, body)
		}
	}
}

func jsonOf(v any) ([]byte, error) { return json.Marshal(v) }

// A known path asked with a method it does not serve is a JSON 405 whose
// Allow header names the methods it does serve, whatever the token (the
// method is wrong before the token matters); GET paths serve HEAD too.
func TestWrongMethodIs405WithAllow(t *testing.T) {
	v := start(t, fileOutbound)
	id := v.ingest(t, 1)[0]
	get, post := "GET, HEAD", "POST"
	cases := []struct{ method, path, allow string }{
		{"POST", "/health", get},
		{"DELETE", "/ready", get},
		{"PUT", "/cluster/status", get},
		{"POST", "/cluster/nodes", get},
		{"POST", "/metrics", get},
		{"DELETE", "/lanes", get},
		{"PUT", "/messages/1", get},
		{"PATCH", "/messages/1", get},
		{"POST", "/messages", get},
		{"GET", "/messages/1/resend", post},
		{"GET", fmt.Sprintf("/queue/%d/retry", id), post},
		{"DELETE", fmt.Sprintf("/queue/%d/skip", id), post},
		{"GET", "/config/reload", post},
		{"HEAD", "/config/reload", post},
	}
	for _, c := range cases {
		for _, role := range []string{"", "admin"} {
			req, _ := http.NewRequest(c.method, v.srv.URL+c.path, nil)
			if role != "" {
				req.Header.Set("Authorization", "Bearer "+tokens[role])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != c.allow {
				t.Errorf("%s %s as %q: %d Allow %q (%s); want 405 Allow %q", c.method, c.path, role, resp.StatusCode,
					resp.Header.Get("Allow"), strings.TrimSpace(string(body)), c.allow)
				continue
			}
			var e struct{ Error string }
			if c.method != "HEAD" && (!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || json.Unmarshal(body, &e) != nil || e.Error == "") {
				t.Errorf("%s %s: 405 body %q is not {\"error\": ...}", c.method, c.path, body)
			}
		}
	}
	for _, p := range []string{"/health", "/ready"} {
		resp, err := http.Head(v.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("HEAD %s: %d, want 200", p, resp.StatusCode)
		}
	}
	if got, body := v.call(t, "DELETE", "/nope", "admin"); got != http.StatusNotFound {
		t.Errorf("DELETE of an unknown path: %d %s, want 404", got, body)
	}
}

// POST /config/reload on a single node is a 409 that says to restart: no
// single node watches the shared config version, so a bump would report
// success and change nothing. A clustered node bumps it.
func TestConfigReloadRefusedOnASingleNode(t *testing.T) {
	v := start(t, fileOutbound)
	code, body := v.call(t, "POST", "/config/reload", "admin")
	var e struct{ Error string }
	if code != http.StatusConflict || json.Unmarshal(body, &e) != nil || e.Error != api.ErrSingleNodeReload.Error() {
		t.Fatalf("POST /config/reload on a single node: %d %s; want 409 {\"error\": %q}", code, body, api.ErrSingleNodeReload)
	}
	ctx := context.Background()
	if got, err := v.e.Store.ConfigVersionRead(ctx, storage.ConfigVersionReadParams{}); err != nil || got != 0 {
		t.Fatalf("config version after a refused reload: %d %v, want 0", got, err)
	}

	clustered := func() actors.Status { s := v.e.Status(); s.Clustered = true; return s }
	srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: clustered, Log: zerolog.Nop()}).Handler())
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("POST", srv.URL+"/config/reload", nil)
	req.Header.Set("Authorization", "Bearer "+tokens["admin"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"config_version":1}` {
		t.Fatalf("POST /config/reload on a clustered node: %d %s; want 200 {\"config_version\":1}", resp.StatusCode, body)
	}
}

// POST /config/reload checks, as mf reload does, that this node's own file
// would reload before it bumps the shared version: it used to bump at once,
// answer 200, and leave the node on its old config with an error in its log
// that the caller never saw.
func TestConfigReloadRefusesAFileThisNodeCannotReload(t *testing.T) {
	v := start(t, fileOutbound)
	clustered := func() actors.Status { s := v.e.Status(); s.Clustered = true; return s }
	var fileErr error
	s := api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: clustered, Log: zerolog.Nop(),
		CheckReload: func() error { return fileErr }})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	reload := func() (int, string) {
		resp, body := adminReload(t, srv.URL)
		return resp.StatusCode, string(body)
	}
	fileErr = errors.New("config: /etc/mf/mf.toml:21:12: toml: array is incomplete")
	code, body := reload()
	var e struct{ Error string }
	if code != http.StatusUnprocessableEntity || json.Unmarshal([]byte(body), &e) != nil ||
		!strings.Contains(e.Error, "array is incomplete") || !strings.Contains(e.Error, "not bumped") {
		t.Fatalf("reload with a file this node cannot reload: %d %s; want 422 with the file's error, saying nothing was bumped", code, body)
	}
	if got, err := v.e.Store.ConfigVersionRead(context.Background(), storage.ConfigVersionReadParams{}); err != nil || got != 0 {
		t.Fatalf("config version after a refused reload: %d %v, want 0", got, err)
	}
	fileErr = nil
	if code, body := reload(); code != http.StatusOK || strings.TrimSpace(body) != `{"config_version":1}` {
		t.Fatalf("reload once the file is fixed: %d %s; want 200 {\"config_version\":1}", code, body)
	}
}

// POST /config/reload on a clustered node still starting (waiting for its
// database) is a 503 with Retry-After: nothing is wrong with its file, and
// the same request works once it runs. It was the 422 of a file that cannot
// be reloaded, which a client or an operator takes for a fault to fix.
func TestConfigReloadOnANodeStillStartingIsUnavailable(t *testing.T) {
	v := start(t, fileOutbound)
	clustered := func() actors.Status { s := v.e.Status(); s.Clustered = true; return s }
	s := api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: clustered, Log: zerolog.Nop(),
		CheckReload: func() error { return fmt.Errorf("node n1: %w", api.ErrNotRunning) }})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	resp, body := adminReload(t, srv.URL)
	var e struct{ Error string }
	if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, "still starting") || !strings.Contains(e.Error, "not bumped") {
		t.Fatalf("reload on a node still starting: %d %s; want 503 saying so, and that nothing was bumped", resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra == "" {
		t.Error("reload on a node still starting: no Retry-After")
	}
	if got, err := v.e.Store.ConfigVersionRead(context.Background(), storage.ConfigVersionReadParams{}); err != nil || got != 0 {
		t.Fatalf("config version after a refused reload: %d %v, want 0", got, err)
	}
}

// The roles are DESIGN §8's, written out here: TestPermissionsTable takes
// what each role may do from HasPermission, so a role given too much passed
// it (an operator allowed CONFIG_WRITE did).
func TestRolesAreThoseOfTheDesign(t *testing.T) {
	all := []api.Permission{api.MonitoringRead, api.MessageRead, api.QueueWrite, api.ConfigWrite}
	want := map[string][]api.Permission{
		"viewer":   {api.MonitoringRead},
		"operator": {api.MonitoringRead, api.MessageRead, api.QueueWrite},
		"admin":    all,
		"":         nil,
		"root":     nil,
	}
	for role, has := range want {
		for _, p := range all {
			if got := api.HasPermission(role, p); got != slices.Contains(has, p) {
				t.Errorf("role %q has %s: %v, want %v", role, p, got, !got)
			}
		}
	}
}

// A token is accepted only when its SHA-256 is the whole configured digest:
// one that matches all but the last byte is as good as none.
func TestATokenMatchesOnlyItsWholeSHA256(t *testing.T) {
	sum := sha256.Sum256([]byte("tok-near"))
	sum[len(sum)-1] ^= 1
	v := startAPI(t, fmt.Sprintf("[[api.tokens]]\nname = \"near\"\nrole = \"admin\"\nsha256 = %q\n", hex.EncodeToString(sum[:])), fileOutbound)
	req, _ := http.NewRequest("GET", v.srv.URL+"/lanes", nil)
	req.Header.Set("Authorization", "Bearer tok-near")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a token whose SHA-256 differs from the configured one in its last byte: %d, want 401", resp.StatusCode)
	}
	if got, _ := v.call(t, "GET", "/lanes", "admin"); got != http.StatusOK {
		t.Fatalf("the admin token beside it: %d, want 200", got)
	}
}

// A credential of blanks is no token, as an empty one is not: with the
// SHA-256 of the empty string configured (the hash of an unset shell
// variable), "Authorization: Bearer" and a no-break space got in as that
// token, since the check for none came before the blanks were trimmed.
func TestABlankBearerTokenIsNone(t *testing.T) {
	// The config refuses this hash (no token is empty); authenticate must
	// not rely on that.
	empty := sha256.Sum256(nil)
	tokens := []config.Token{{Name: "unset", Role: "admin", SHA256: hex.EncodeToString(empty[:])}}
	for _, h := range []string{"Bearer ", "Bearer  ", "Bearer \t", "bearer   ", "Bearer \u00a0", "Bearer \u0085\u3000"} {
		req, _ := http.NewRequest("GET", "/lanes", nil)
		req.Header.Set("Authorization", h)
		if api.Authenticates(req, tokens) {
			t.Errorf("Authorization %q with the empty string's SHA-256 as a token's: authenticated, want none", h)
		}
	}
}

// adminReload sends POST /config/reload with the admin token to the API at
// base and returns its answer and body.
func adminReload(t *testing.T, base string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/config/reload", nil)
	req.Header.Set("Authorization", "Bearer "+tokens["admin"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

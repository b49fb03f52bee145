package cli

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
)

// A token in MF_API_TOKEN with a trailing newline (as an env file or a
// secret mount leaves it) is sent without it: it used to fail with
// net/http's "invalid header field value", which does not name
// MF_API_TOKEN. One with a line break inside is refused naming it.
func TestAPITokenFromTheEnvironmentIsTrimmed(t *testing.T) {
	var mu sync.Mutex
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Get("Authorization")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"node_id":"n1","clustered":false,"is_leader":true,"role":"single-node","config_version":0,"term":0}`))
	}))
	t.Cleanup(srv.Close)

	t.Setenv(TokenEnv, "mf_tok\n")
	if out, err := runMF(t, "status", "--api", srv.URL); err != nil || !strings.Contains(out, "single-node") {
		t.Fatalf("mf status with a token ending in a newline: %v, printed %q", err, out)
	}
	mu.Lock()
	auth := got
	mu.Unlock()
	if auth != "Bearer mf_tok" {
		t.Fatalf("Authorization %q, want \"Bearer mf_tok\"", auth)
	}

	t.Setenv(TokenEnv, "mf_t\nok")
	if _, err := runMF(t, "status", "--api", srv.URL); err == nil || !strings.Contains(err.Error(), TokenEnv) {
		t.Fatalf("mf status with a line break inside the token: %v, want an error naming %s", err, TokenEnv)
	}
}

// An answer that is not mf's JSON (a proxy's 502 page) is quoted in the
// error, briefly: the error ended in "502 Bad Gateway: " with nothing after.
func TestAnAnswerThatIsNotMfsIsQuoted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream connect error", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	t.Setenv(TokenEnv, "mf_tok")
	if _, err := runMF(t, "status", "--api", srv.URL); err == nil || !strings.Contains(err.Error(), "502 Bad Gateway: upstream connect error") {
		t.Fatalf("mf status behind a proxy answering 502: %v; want the proxy's words", err)
	}
}

// --json prints the API's answer indented and ends it with one newline. The
// API's encoder ends its answer with a newline, which json.Indent keeps, so
// every --json output ended with a blank line: a script that counted lines,
// or joined two outputs, got one too many.
func TestJSONOutputEndsWithOneNewline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"node_id":"n1","clustered":false,"is_leader":true,"role":"single-node","config_version":0,"term":0}` + "\n"))
	}))
	t.Cleanup(srv.Close)
	t.Setenv(TokenEnv, "mf_tok")
	out, err := runMF(t, "status", "--api", srv.URL, "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out, "}\n") || strings.HasSuffix(out, "\n\n") {
		t.Fatalf("mf status --json printed %q; want the object and one newline", out)
	}
}

// --api given as host:port, the form of every other address flag (mf send
// --to), is refused saying what it wants: net/url's "first path segment in
// URL cannot contain colon" did not.
func TestAPIFlagWithoutAScheme(t *testing.T) {
	t.Setenv(TokenEnv, "mf_tok")
	for _, cmd := range []string{"status", "nodes"} {
		_, err := runMF(t, cmd, "--api", "127.0.0.1:8765")
		if err == nil || !strings.Contains(err.Error(), "http://127.0.0.1:8765") {
			t.Fatalf("mf %s --api 127.0.0.1:8765: %v, want an error suggesting http://127.0.0.1:8765", cmd, err)
		}
	}
}

// mf nodes says what the lease is: a single node (its answer names itself
// lease owner with no expiry) holds none and leads while it runs, a
// cluster nobody was elected in has none, and a lease past its expiry
// expired. They printed "lease expires in never", "lease owner none, lease
// expires in never" and "lease expires in -1m30s".
func TestNodesSaysWhatTheLeaseIs(t *testing.T) {
	t.Setenv(TokenEnv, "mf_tok")
	now := float64(time.Now().UnixMicro()) / 1e6
	for _, tc := range []struct {
		name, body, want string
	}{
		{"single node", `{"nodes":[{"node_id":"n1","host":"h","pid":1,"status":"active","started_at":null,"last_seen":null,"is_leader":true}],"leader_node_id":"n1","lease_owner":"n1","lease_expires_at":null}`,
			"leader: n1 (single node: it takes no lease and leads while it runs)"},
		{"never elected", `{"nodes":[],"leader_node_id":null,"lease_owner":null,"lease_expires_at":null}`,
			"leader: none (no lease: no node has been elected yet)"},
		{"expired", fmt.Sprintf(`{"nodes":[],"leader_node_id":null,"lease_owner":"n1","lease_expires_at":%f}`, now-90),
			"leader: none (lease owner n1, lease expired 1m"},
		{"live", fmt.Sprintf(`{"nodes":[],"leader_node_id":"n1","lease_owner":"n1","lease_expires_at":%f}`, now+630),
			"leader: n1 (lease owner n1, lease expires in 10m"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(tc.body))
		}))
		out, err := runMF(t, "nodes", "--api", srv.URL)
		srv.Close()
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("mf nodes, %s: %v, printed\n%s\nwant a line starting %q", tc.name, err, out, tc.want)
		}
	}
}

// mf nodes counts a node's last beat, its start and the lease's expiry on
// the database's clock, which stamped them (api.DBNowHeader), not on
// the clock of the machine it runs on: with that clock an hour off from
// the database's, a node seen 2 s ago showed as seen an hour ago, and a
// live lease as expired.
func TestNodesCountsAgesOnTheDatabaseClock(t *testing.T) {
	t.Setenv(TokenEnv, "mf_tok")
	db := float64(time.Now().Add(-time.Hour).UnixMicro()) / 1e6 // the database's clock, an hour behind this one
	body := fmt.Sprintf(`{"nodes":[{"node_id":"n1","host":"h","pid":1,"status":"active","started_at":%f,"last_seen":%f,"is_leader":true}],`+
		`"leader_node_id":"n1","lease_owner":"n1","lease_expires_at":%f}`, db-600, db-2, db+20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(api.DBNowHeader, fmt.Sprintf("%f", db))
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	out, err := runMF(t, "nodes", "--api", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" 2s ago", " 10m0s ago", "leader: n1 (lease owner n1, lease expires in 20s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("mf nodes with the database clock an hour behind this machine's printed\n%s\nwant %q", out, want)
		}
	}
}

// The lines mf token new prints are a config mf check takes, whatever the
// name it accepts: they wrote it with Go's %q, and a quote or a backslash
// came out as an escape TOML has not. A name the config refuses (a control
// character, a blank at either end) is refused here, before a token is made.
func TestTokenNewPrintsLinesTheConfigTakes(t *testing.T) {
	for _, name := range []string{"", "grafana", "ünïcødé ✓", `quote" back\slash`} {
		out, err := runMF(t, "token", "new", "--role", "viewer", "--name", name)
		if err != nil {
			t.Fatalf("--name %q: %v", name, err)
		}
		_, lines, ok := strings.Cut(out, "\n\n[[api.tokens]]\n")
		if !ok {
			t.Fatalf("--name %q printed no [[api.tokens]] lines: %q", name, out)
		}
		c, err := config.Parse([]byte("[[api.tokens]]\n"+lines), "mf.toml")
		if err != nil {
			t.Errorf("--name %q: the lines printed are refused: %v\n%s", name, err, lines)
			continue
		}
		want := name
		if want == "" {
			want = "viewer"
		}
		if got := c.API.Tokens[0].Name; got != want {
			t.Errorf("--name %q read back as %q", name, got)
		}
	}
	if _, err := runMF(t, "token", "new", "--role", "viewer", "--name", "bad\xff"); err == nil || !strings.Contains(err.Error(), "--name is not valid UTF-8") {
		t.Errorf("--name of invalid UTF-8: %v", err)
	}
	for name, why := range map[string]string{"bell\a": "contains the control character U+0007", "ops ": "begins or ends with a blank"} {
		out, err := runMF(t, "token", "new", "--role", "viewer", "--name", name)
		if err == nil || !strings.Contains(err.Error(), why) || strings.Contains(out, "token:") {
			t.Errorf("--name %q: error %v, printed %q; want it refused (%s) before a token is made", name, err, out, why)
		}
	}
}

// mf status, mf nodes and mf token new take flags only: an argument (a
// node's name, a token's) was ignored, and mf status node-b answered for
// the default node as if for node-b.
func TestCommandsWithoutArgumentsRefuseOne(t *testing.T) {
	for _, args := range [][]string{
		{"status", "node-b"},
		{"nodes", "--json", "extra"},
		{"token", "new", "--role", "viewer", "grafana"},
	} {
		out, err := runMF(t, args...)
		if err == nil || !strings.Contains(err.Error(), "takes no argument") {
			t.Errorf("mf %s: error %v, printed %q; want the argument refused", strings.Join(args, " "), err, out)
		}
	}
}

// mf messages waits as long as the API's own bound on a search (30 s): a
// search the API answered in 11 s (the README's 30-day search on SQLite)
// was reported as a client timeout at 10 s, saying nothing of the window.
func TestMessagesWaitsAsLongAsTheAPIsSearchMay(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(11 * time.Second):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"messages":[],"since":"2026-10-30T00:00:00Z","until":null,"next_before_id":null}` + "\n"))
	}))
	t.Cleanup(srv.Close)
	t.Setenv(TokenEnv, "mf_tok")
	out, err := runMF(t, "messages", "--api", srv.URL, "--since", "2026-10-30T00:00:00Z")
	if err != nil || !strings.Contains(out, "no message found") {
		t.Fatalf("mf messages on a search the API answers in 11 s: %q, %v; want the API's answer", out, err)
	}
}

// A password in --api (a proxy's basic auth) is not printed: neither in the
// error of a node that does not answer, nor in the commands a listing
// suggests next, which repeated --api word for word onto terminals and CI
// logs.
func TestAPasswordInTheAPIURLIsNotPrinted(t *testing.T) {
	t.Setenv(TokenEnv, "mf_tok")
	nobody := "http://ops:Hunter2@" + enginetest.FreeAddr(t)
	_, err := runMF(t, "status", "--api", nobody)
	if err == nil || strings.Contains(err.Error(), "Hunter2") || !strings.Contains(err.Error(), "no API answers at http://ops:xxxxx@") {
		t.Fatalf("mf status at a node that does not answer: %v; want the URL shown without its password", err)
	}
	for _, bad := range []string{"ops:Hunter2@127.0.0.1:1", "ftp://ops:Hunter2@127.0.0.1:1", "http://ops:Hunter2@"} {
		if _, err := runMF(t, "status", "--api", bad); err == nil || strings.Contains(err.Error(), "Hunter2") {
			t.Fatalf("mf status --api %s (not an API URL): %v; want it refused without the password", bad, err)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"lanes":[{"lane":"emr/P1","destination":"emr","depth":4,"head_id":17,"head_age_seconds":3.4,"blocked":true,"attempts":9,"last_error":"AE"}],"next_after":null}`))
	}))
	t.Cleanup(srv.Close)
	withPassword := strings.Replace(srv.URL, "http://", "http://ops:Hunter2@", 1)
	out, err := runMF(t, "lanes", "--api", withPassword)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "Hunter2") || !strings.Contains(out, "mf retry --api http://ops:xxxxx@") {
		t.Fatalf("mf lanes printed %q; want its next commands without the password", out)
	}
}

// A usage error (an unknown flag, a bad value, a missing --role) is the
// error alone, on stderr: urfave/cli printed "Incorrect Usage" and the
// whole help on stdout, which a script reading mf status --json or mf token
// new took for the command's output.
func TestAUsageErrorPrintsNothingOnStdout(t *testing.T) {
	for _, args := range [][]string{{"status", "--bogus"}, {"--bogus"}, {"bench", "--count", "abc"}, {"token", "new"}, {"token", "new", "--bogus"}} {
		var stdout, stderr bytes.Buffer
		err := App(&stdout, &stderr).Run(append([]string{"mf"}, args...))
		if err == nil || stdout.Len() != 0 {
			t.Errorf("mf %s: %v, printed %q on stdout; want an error and nothing on stdout", strings.Join(args, " "), err, stdout.String())
		}
	}
}

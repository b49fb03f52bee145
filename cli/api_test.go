package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
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

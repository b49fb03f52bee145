package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/api"
)

// Each read of a message's content (PHI) is logged with the message's id
// and control id and the token that read it, as a hospital's audit of PHI access asks, and the line carries no
// part of the message.
func TestAMessageReadIsLoggedWithItsReader(t *testing.T) {
	v := start(t, fileOutbound)
	v.ingest(t, 1) // message 1 of a new store
	var logs logbuf.Buffer
	srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: v.e.Status, Log: zerolog.New(&logs)}).Handler())
	t.Cleanup(srv.Close)
	v.srv = srv
	if got, body := v.call(t, "GET", "/messages/1", "operator"); got != http.StatusOK {
		t.Fatalf("GET /messages/1: %d %s", got, body)
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "message read") {
			line = l
		}
	}
	want := `"message_id":1,"control_id":"X0","token":"operator-token"`
	if !strings.Contains(line, want) {
		t.Fatalf("no access line naming the message, its control id and the token (want %s); logs:\n%s", want, logs.String())
	}
	if strings.Contains(line, "PID") || strings.Contains(line, "MSH") {
		t.Fatalf("the access line carries the message: %s", line)
	}
}

// A request refused for its credential is logged, as a hospital's audit of
// access asks: a bearer token that matches none configured (a token
// revoked or mistyped, or someone trying), with the client's address, and a
// token whose role lacks the permission, with its name. Both were answered
// and left no trace. Neither line carries the credential; a request with no
// credential at all (a probe, a client not set up) is not logged.
func TestRefusedCredentialsAreLogged(t *testing.T) {
	v := start(t, fileOutbound)
	var logs logbuf.Buffer
	srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: v.e.Status, Log: zerolog.New(&logs)}).Handler())
	t.Cleanup(srv.Close)
	v.srv = srv
	if got, _ := v.call(t, "GET", "/lanes", ""); got != http.StatusUnauthorized {
		t.Fatalf("GET /lanes without a token: %d", got)
	}
	if s := logs.String(); s != "" {
		t.Fatalf("a request without a credential is logged: %s", s)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/lanes", nil)
	req.Header.Set("Authorization", "Bearer not-a-token-SECRETGUESS")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, _ := v.call(t, "GET", "/messages/1", "viewer"); got != http.StatusForbidden {
		t.Fatalf("GET /messages/1 as a viewer: %d", got)
	}
	s := logs.String()
	for _, want := range []string{
		`"remote":"127.0.0.1:`, "a bearer token that matches no configured token",
		`"token":"viewer-token"`, `"permission":"MESSAGE_READ"`, `"path":"/messages/1"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the log lacks %s:\n%s", want, s)
		}
	}
	if strings.Contains(s, "SECRETGUESS") || strings.Contains(s, tokens["viewer"]) {
		t.Fatalf("the log carries a credential:\n%s", s)
	}
}

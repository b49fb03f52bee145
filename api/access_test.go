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

// Each read of a message's content (PHI) is logged with the token that read
// it, as a hospital's audit of PHI access asks, and the line carries no
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
	want := `"message_id":1,"token":"operator-token"`
	if !strings.Contains(line, want) {
		t.Fatalf("no access line naming the message and the token (want %s); logs:\n%s", want, logs.String())
	}
	if strings.Contains(line, "PID") || strings.Contains(line, "MSH") {
		t.Fatalf("the access line carries the message: %s", line)
	}
}

package api_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
)

// What Go's HTTP server reports itself (a failed TLS handshake here: a
// client that does not trust the API's certificate) goes to the node's log
// as a JSON line like every other, at WARN. Before, net/http wrote it with
// the standard library's logger: a plain-text line on stderr in the middle
// of the JSON log, which a log pipeline parsing JSON drops or chokes on.
func TestHTTPServerErrorsAreLoggedAsJSON(t *testing.T) {
	cfg, _ := tlsAPIConfig(t, enginetest.FreeAddr(t))
	var logs enginetest.LogBuffer
	s := api.New(api.Options{Config: cfg, Log: zerolog.New(&logs)})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	// The system roots do not hold the test CA: the client refuses the
	// server's certificate and the server's handshake fails.
	c, err := tls.Dial("tcp", s.Addr(), &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "localhost"})
	if err == nil {
		c.Close()
		t.Fatal("a client without the test CA completed the handshake")
	}
	var line map[string]any
	enginetest.WaitFor(t, "a JSON log line about the failed handshake", 10*time.Second, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "TLS handshake error") && json.Unmarshal([]byte(l), &line) == nil {
				return true
			}
		}
		return false
	})
	if line["level"] != "warn" {
		t.Fatalf("the handshake failure is logged %v, want at warn", line)
	}
}

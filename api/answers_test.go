package api_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/api"
)

// rawCall sends one raw HTTP/1.1 request to addr and returns the answer and
// its body.
func rawCall(t *testing.T, addr, request string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(request, " ")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// The answers net/http's mux writes itself are JSON {"error": ...} like
// every other: before, a path it cleans was a 307 with an HTML body (GET)
// or none (POST), the request target "*" a bare 400, a CONNECT a text 404.
// A redirect keeps its status and Location, and a client that follows it
// with its token gets the endpoint.
func TestTheMuxsOwnAnswersAreJSON(t *testing.T) {
	v := start(t, fileOutbound)
	addr := serve(t, v, api.New)
	cases := []struct {
		request  string
		status   int
		location string
	}{
		{"GET //health HTTP/1.1\r\nHost: mf\r\n\r\n", 307, "/health"},
		{"GET /health/../health?x=1 HTTP/1.1\r\nHost: mf\r\n\r\n", 307, "/health?x=1"},
		{"GET /messages/1/../2 HTTP/1.1\r\nHost: mf\r\n\r\n", 307, "/messages/2"},
		{"POST /./config/reload HTTP/1.1\r\nHost: mf\r\nContent-Length: 0\r\n\r\n", 307, "/config/reload"},
		{"GET * HTTP/1.1\r\nHost: mf\r\n\r\n", 400, ""},
		{"CONNECT mf:80 HTTP/1.1\r\nHost: mf\r\n\r\n", 404, ""},
		{"GET /nope HTTP/1.1\r\nHost: mf\r\n\r\n", 404, ""},
		{"POST /health HTTP/1.1\r\nHost: mf\r\nContent-Length: 0\r\n\r\n", 405, ""},
	}
	for _, c := range cases {
		line, _, _ := strings.Cut(c.request, "\r\n")
		resp, body := rawCall(t, addr, c.request)
		var e struct{ Error string }
		if resp.StatusCode != c.status || resp.Header.Get("Location") != c.location {
			t.Errorf("%s: %d Location %q, want %d Location %q", line, resp.StatusCode, resp.Header.Get("Location"), c.status, c.location)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %q body %q, want JSON {\"error\": ...}", line, resp.StatusCode, ct, body)
		}
	}

	req, _ := http.NewRequest("GET", "http://"+addr+"//cluster/status", nil)
	req.Header.Set("Authorization", "Bearer "+tokens["viewer"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/cluster/status" {
		t.Fatalf("GET //cluster/status followed: %d at %s, want 200 at /cluster/status", resp.StatusCode, resp.Request.URL.Path)
	}
}

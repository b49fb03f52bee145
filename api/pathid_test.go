package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A queue or message id that is not a positive int64 is a JSON 400 that
// says what an id must be. One past int64 is a positive integer: the answer
// says how large an id may be, where it said "must be a positive integer"
// of an id that is one.
func TestBadIDsAre400(t *testing.T) {
	v := start(t, fileOutbound)
	for _, c := range []struct{ method, path, role string }{
		{"GET", "/messages/abc", "operator"},
		{"GET", "/messages/-1", "operator"},
		{"GET", "/messages/0", "operator"},
		{"GET", "/messages/1.5", "operator"},
		{"GET", "/messages/+1", "operator"},
		{"POST", "/queue/+1/retry", "operator"},
		{"GET", "/messages/9223372036854775808", "operator"},
		{"GET", "/messages/99999999999999999999999", "operator"},
		{"POST", "/queue/9223372036854775808/retry", "operator"},
		{"POST", "/queue/-3/skip", "operator"},
	} {
		code, body := v.call(t, c.method, c.path, c.role)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(body, &e) != nil {
			t.Errorf("%s %s: %d %s, want 400 with a JSON error", c.method, c.path, code, body)
			continue
		}
		if !strings.Contains(e.Error, "positive integer") || !strings.Contains(e.Error, "9223372036854775807") {
			t.Errorf("%s %s: %q; want it to say an id is a positive integer up to 9223372036854775807", c.method, c.path, e.Error)
		}
	}
	if code, body := v.call(t, "GET", "/messages/9223372036854775807", "operator"); code != http.StatusNotFound {
		t.Errorf("GET the largest id: %d %s, want 404", code, body)
	}
}

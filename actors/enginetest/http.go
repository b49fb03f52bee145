package enginetest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// HTTPDestination is an HTTP outbound's peer: it records the control ids it
// accepts, and while Reject is set it refuses (400, a permanent failure) any
// message containing "POISON", with a reason phrase that quotes it, as real
// destinations' words often quote a patient field (PHI).
type HTTPDestination struct {
	*httptest.Server
	Reject atomic.Bool
	mu     sync.Mutex
	got    []string
}

// RejectedPatient is what an HTTPDestination's refusal quotes of the message.
const RejectedPatient = "POISON"

// StartHTTPDestination starts one that rejects POISON from the start.
func StartHTTPDestination(t testing.TB) *HTTPDestination {
	d := &HTTPDestination{}
	d.Reject.Store(true)
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if d.Reject.Load() && strings.Contains(string(body), "POISON") {
			// net/http sends only the standard phrase: write the reply raw.
			if c, buf, err := http.NewResponseController(w).Hijack(); err == nil {
				_, _ = buf.WriteString("HTTP/1.1 400 Unknown patient " + RejectedPatient + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				_ = buf.Flush()
				_ = c.Close()
			}
			return
		}
		d.mu.Lock()
		d.got = append(d.got, r.Header.Get("X-MF-Control-ID"))
		d.mu.Unlock()
	}))
	t.Cleanup(d.Close)
	return d
}

// Received returns the control ids accepted so far, in order.
func (d *HTTPDestination) Received() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.got...)
}

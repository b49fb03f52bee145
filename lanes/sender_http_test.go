package lanes

import (
	"bufio"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/messagefoundry/mf/config"
)

func httpOutbound(url string) config.Outbound {
	return config.Outbound{Name: "api", Type: config.OutboundHTTP, URL: url, TimeoutSeconds: 5}
}

func newTestHTTPSender(t *testing.T, o config.Outbound) Sender {
	t.Helper()
	s, err := NewSender(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestHTTPSenderPostsTheMessage(t *testing.T) {
	t.Parallel()
	type request struct {
		method, path, contentType, queueID, controlID string
		body                                          []byte
	}
	got := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- request{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("X-MF-Queue-ID"), r.Header.Get("X-MF-Control-ID"), body}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()

	m := testMessage("MSG1")
	if err := newTestHTTPSender(t, httpOutbound(srv.URL+"/hl7/in")).Send(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.method != http.MethodPost || r.path != "/hl7/in" || r.contentType != "x-application/hl7-v2+er7" ||
		r.queueID != "42" || r.controlID != "MSG1" || string(r.body) != string(m.Payload) {
		t.Errorf("request %+v", r)
	}
}

func TestHTTPSenderStatusCodes(t *testing.T) {
	t.Parallel()
	var redirectFollowed atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			redirectFollowed.Store(true)
			return
		}
		code := 0
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code)
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
		fmt.Fprint(w, "the receiver's explanation")
	}))
	defer srv.Close()

	for _, tt := range []struct {
		code     int
		ok, perm bool
	}{
		{200, true, false}, {201, true, false}, {204, true, false},
		{408, false, false}, {425, false, false}, {429, false, false}, {500, false, false}, {502, false, false}, {503, false, false}, {504, false, false},
		{400, false, true}, {401, false, true}, {403, false, true}, {404, false, true}, {413, false, true}, {422, false, true},
		{301, false, true}, {302, false, true}, {307, false, true}, {308, false, true},
	} {
		url := fmt.Sprintf("%s/%d", srv.URL, tt.code)
		err := newTestHTTPSender(t, httpOutbound(url)).Send(t.Context(), testMessage("MSG1"))
		if tt.ok {
			if err != nil {
				t.Errorf("%d: %v", tt.code, err)
			}
			continue
		}
		wantDeliveryError(t, err, tt.perm, fmt.Sprintf(`http api: %s answered %d to queue id 42 (control id "MSG1"): %s`, url, tt.code, http.StatusText(tt.code)))
		// The reason phrase is the destination's text ("422 Unknown
		// patient …"): in the queue row, not in logs.
		if logged := forLog(err, false).Error(); strings.Contains(logged, http.StatusText(tt.code)) {
			t.Errorf("%d: the log form %q quotes the reason phrase", tt.code, logged)
		}
	}
	if redirectFollowed.Load() {
		t.Error("a redirect was followed: a POST must not be re-sent elsewhere (or turned into a GET)")
	}
}

// startCountingConnections starts srv and returns the count of the
// connections it accepts.
func startCountingConnections(srv *httptest.Server) *atomic.Int32 {
	conns := new(atomic.Int32)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	return conns
}

func TestHTTPSenderReusesConnections(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A large answer, partly read by nobody: the sender drains it.
		fmt.Fprint(w, strings.Repeat("x", 32<<10))
	}))
	conns := startCountingConnections(srv)
	defer srv.Close()
	s := newTestHTTPSender(t, httpOutbound(srv.URL))
	for range 10 {
		if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 10 sequential POSTs, want 1 (bodies drained and closed)", n)
	}
}

func TestHTTPSenderConcurrentSends(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("X-MF-Control-ID")] = true
		mu.Unlock()
	}))
	defer srv.Close()
	s := newTestHTTPSender(t, httpOutbound(srv.URL))
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Send(t.Context(), testMessage(fmt.Sprint("C", i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(seen) != 20 {
		t.Errorf("%d distinct messages received, want 20", len(seen))
	}
}

func TestHTTPSenderTransportErrorsAreRetryable(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		err := newTestHTTPSender(t, httpOutbound(url)).Send(t.Context(), testMessage("MSG1"))
		wantDeliveryError(t, err, false, `http api: connecting for queue id 42 (control id "MSG1") failed; next connection in `)
	})
	t.Run("connection dropped", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		}))
		defer srv.Close()
		err := newTestHTTPSender(t, httpOutbound(srv.URL)).Send(t.Context(), testMessage("MSG1"))
		wantDeliveryError(t, err, false, "failed")
	})
	t.Run("a timeout at a URL that says malformed", func(t *testing.T) {
		// The error's text holds the URL: matched on it, every timeout or
		// reset there read as a reply that is not HTTP, its cause hidden.
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		defer srv.Close()
		defer close(release) // before the Close, which waits for the handler
		o := httpOutbound(srv.URL + "/hl7/malformed-adt")
		o.TimeoutSeconds = 0.3
		err := newTestHTTPSender(t, o).Send(t.Context(), testMessage("MSG1"))
		wantDeliveryError(t, err, false, `http api: POST of queue id 42 (control id "MSG1") failed`)
	})
	t.Run("a reply that is not HTTP", func(t *testing.T) {
		// An endpoint that answers in HL7 (an ACK quoting the patient):
		// net/http quotes the line it could not read, so it is the
		// destination's detail, kept out of logs.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			_, _ = c.Write([]byte("MSA|AE|MSG1|Unknown patient MRN888 DOE^JANE\r\n\r\n"))
		}()
		err = newTestHTTPSender(t, httpOutbound("http://"+ln.Addr().String())).Send(t.Context(), testMessage("MSG1"))
		wantDeliveryError(t, err, false, `http api: the reply to queue id 42 (control id "MSG1") is not HTTP`)
		if !strings.Contains(err.Error(), "malformed") {
			t.Errorf("the queue row's error %q lost what net/http found", err)
		}
		logged := forLog(err, false).Error()
		for _, word := range []string{"MSA", "Unknown", "patient", "MRN888", "DOE"} {
			if strings.Contains(logged, word) {
				t.Errorf("the log form %q quotes the reply", logged)
			}
		}
	})
	t.Run("stalled server hits the deadline", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		defer srv.Close()
		defer close(release)
		ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := newTestHTTPSender(t, httpOutbound(srv.URL)).Send(ctx, testMessage("MSG1"))
		de := wantDeliveryError(t, err, false, "failed")
		if !errors.Is(de, context.DeadlineExceeded) {
			t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Send took %v", took)
		}
	})
	t.Run("timeout_seconds without ctx deadline", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		defer srv.Close()
		defer close(release)
		o := httpOutbound(srv.URL)
		o.TimeoutSeconds = 0.15
		start := time.Now()
		wantDeliveryError(t, newTestHTTPSender(t, o).Send(context.Background(), testMessage("MSG1")), false, "failed")
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Send took %v", took)
		}
	})
}

func TestHTTPSenderHTTPS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	err := newTestHTTPSender(t, httpOutbound(srv.URL)).Send(t.Context(), testMessage("MSG1"))
	wantDeliveryError(t, err, false, "certificate")

	o := httpOutbound(srv.URL)
	o.TLSCA = caFile
	if err := newTestHTTPSender(t, o).Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatalf("with tls_ca: %v", err)
	}
}

func TestHTTPSenderMutualTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
	var client atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = pki.serverTLS()
	srv.StartTLS()
	defer srv.Close()

	o := httpOutbound(srv.URL)
	o.TLSCA, o.TLSCert, o.TLSKey = pki.caFile, pki.clientCert, pki.clientKey
	if err := newTestHTTPSender(t, o).Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatal(err)
	}
	if client.Load() != "mf-test-client" {
		t.Errorf("client certificate %v", client.Load())
	}
}

func TestHeaderSafe(t *testing.T) {
	t.Parallel()
	if got := headerSafe("A\x01B\x7fC é"); got != "A?B?C é" {
		t.Errorf("headerSafe = %q", got)
	}
}

// A POST that got no connection (refused, unreachable, a failed TLS
// handshake) wrote nothing: no attempt, as for MLLP. The destination's
// next connection is then tried only after a backoff shared by its lanes
// (RetryAfter says when), and the sends before it connect to nothing; once
// connected, the backoff starts again from retry_base_seconds. Counted,
// the lanes of a destination down for a few tries used up max_attempts.
func TestHTTPSenderUnreachableWritesNothingAndBacksOff(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // refused from now on
	o := httpOutbound(srv.URL)
	o.RetryBaseSeconds, o.RetryMaxSeconds = 30, 60 // a backoff that outlasts the test
	s := newTestHTTPSender(t, o).(*httpSender)
	var dials atomic.Int64
	dial := s.transport.DialContext
	s.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	for i, msg := range []string{"MSG1", "MSG2", "MSG3"} {
		err := s.Send(t.Context(), testMessage(msg))
		de := &DeliveryError{}
		if !errors.As(err, &de) || !errors.Is(err, errNotWritten) || de.Permanent || de.RetryAfter <= 0 || de.RetryAfter > 60*time.Second {
			t.Fatalf("send %d to a refusing destination: %v (RetryAfter %v); want errNotWritten, due when the next connection is", i+1, err, de.RetryAfter)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials for three sends within the backoff, want 1", n)
	}
}

// The URL's user, password and query (basic auth, an API key) never reach a
// failure's text: it is logged, and kept in the queue row, which GET /lanes
// shows to any monitoring token.
func TestHTTPSenderFailuresShowTheURLWithoutCredentials(t *testing.T) {
	t.Parallel()
	withCredentials := func(base string) string {
		return strings.Replace(base, "http://", "http://mf:S3cretPW@", 1) + "/hl7?api_key=TOKEN123"
	}
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer unavailable.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()

	for _, tt := range []struct{ name, base, says string }{
		{"an answer", unavailable.URL, "answered 503"},
		{"a refused connection", gone.URL, "failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := newTestHTTPSender(t, httpOutbound(withCredentials(tt.base))).Send(t.Context(), testMessage("MSG1"))
			wantDeliveryError(t, err, false, tt.says)
			text, detail := recorded(err)
			for form, s := range map[string]string{"log": forLog(err, false).Error(), "queue row": text, "detail": detail} {
				for _, secret := range []string{"S3cretPW", "TOKEN123", "@"} {
					if strings.Contains(s, secret) {
						t.Errorf("the %s form %q shows %s", form, s, secret)
					}
				}
			}
			if want := tt.base + "/hl7"; !strings.Contains(text, want) {
				t.Errorf("the queue row %q does not name %s", text, want)
			}
		})
	}
}

func TestHTTPSenderRetryAfter(t *testing.T) {
	t.Parallel()
	var header atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", header.Load().(string))
		code := http.StatusServiceUnavailable
		if r.URL.Path == "/400" {
			code = http.StatusBadRequest
		}
		w.WriteHeader(code)
	}))
	defer srv.Close()
	s := newTestHTTPSender(t, httpOutbound(srv.URL))
	header.Store("120")
	de := wantDeliveryError(t, s.Send(t.Context(), testMessage("MSG1")), false, "answered 503 to queue id 42 (control id \"MSG1\"), asking for a retry in 2m0s")
	if de.RetryAfter != 2*time.Minute {
		t.Errorf("RetryAfter = %v, want 2m", de.RetryAfter)
	}
	header.Store("soon")
	if de := wantDeliveryError(t, s.Send(t.Context(), testMessage("MSG1")), false, "answered 503"); de.RetryAfter != 0 {
		t.Errorf("RetryAfter = %v for an unreadable header, want 0", de.RetryAfter)
	}
	header.Store("60")
	if de := wantDeliveryError(t, newTestHTTPSender(t, httpOutbound(srv.URL+"/400")).Send(t.Context(), testMessage("MSG1")), true, "answered 400"); de.RetryAfter != 0 {
		t.Errorf("RetryAfter = %v on a rejection, want 0", de.RetryAfter)
	}

	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		" 7 ":                           7 * time.Second,
		"-5":                            0,
		"1.5":                           0,
		"Thu, 26 Nov 2026 03:01:30 GMT": 90 * time.Second,
		"Thu, 26 Nov 2026 02:59:00 GMT": 0, // past
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

// The lanes of one destination (a lane_key splits it) send at the same
// time: the connections they open are kept for the next messages, not
// closed after each but two (net/http's default idle connections per host),
// which opened a connection, and with https a TLS handshake, per message.
func TestHTTPSenderKeepsTheConnectionsOfConcurrentLanes(t *testing.T) {
	t.Parallel()
	const lanes, rounds = 8, 4
	var (
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{})
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Each request waits for the round's others: they are in flight at
		// once, each on its own connection.
		mu.Lock()
		arrived++
		if arrived%lanes == 0 {
			close(all)
		}
		round := all
		mu.Unlock()
		<-round
	}))
	conns := startCountingConnections(srv)
	defer srv.Close()
	s := newTestHTTPSender(t, httpOutbound(srv.URL))
	for range rounds {
		var wg sync.WaitGroup
		for i := range lanes {
			wg.Go(func() {
				if err := s.Send(t.Context(), testMessage(fmt.Sprint("C", i))); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		mu.Lock()
		all = make(chan struct{})
		mu.Unlock()
	}
	if n := conns.Load(); n != lanes {
		t.Errorf("%d connections for %d rounds of %d concurrent POSTs, want %d (each kept for the next round)", n, rounds, lanes, lanes)
	}
}

// A destination that answers and then never ends its body (a streaming
// endpoint, a broken proxy) has given its status: the send ends then, not
// at timeout_seconds, which held each message of the lane that long.
func TestHTTPSenderDoesNotWaitOutABodyThatNeverEnds(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			fmt.Fprint(w, "still coming")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}))
		o := httpOutbound(srv.URL)
		o.TimeoutSeconds = 20
		start := time.Now()
		err := newTestHTTPSender(t, o).Send(t.Context(), testMessage("MSG1"))
		took := time.Since(start)
		srv.Close()
		if code == http.StatusOK && err != nil {
			t.Errorf("%d: %v", code, err)
		}
		if code != http.StatusOK {
			wantDeliveryError(t, err, false, "answered 503")
		}
		if took > 2*httpDrainWait {
			t.Errorf("%d with a body that never ends: Send took %v, want at most %v", code, took.Round(time.Millisecond), 2*httpDrainWait)
		}
	}
}

// A destination that closes a keep-alive connection a moment after its
// answer, without saying Connection: close, leaves the next POST on a
// connection it no longer reads. That POST is sent again at once on a new
// connection, not failed: failed, every second message waited out the
// lane's backoff and counted an attempt.
func TestHTTPSenderResendsAtOnceWhatAReusedConnectionClosedOn(t *testing.T) {
	t.Parallel()
	addr, seen := httpClosingReceiver(t)
	s := newTestHTTPSender(t, httpOutbound("http://"+addr))
	for _, id := range []string{"MSG1", "MSG2", "MSG3"} {
		if err := s.Send(t.Context(), testMessage(id)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	received, accepted := seen()
	if want := []string{"MSG1", "MSG2", "MSG2", "MSG3", "MSG3"}; !slices.Equal(received, want) || accepted != 3 {
		t.Errorf("received %v on %d connections, want %v on 3", received, accepted, want)
	}
}

// httpClosingReceiver is closingReceiver speaking HTTP: it answers the first
// request of each connection 200 and closes the connection on the second
// without answering.
func httpClosingReceiver(t *testing.T) (addr string, seen func() (received []string, accepted int)) {
	return closingReceiver(t, func(c net.Conn) func() (string, func(), error) {
		br := bufio.NewReader(c)
		return func() (string, func(), error) {
			req, err := http.ReadRequest(br)
			if err != nil {
				return "", nil, err
			}
			_, _ = io.Copy(io.Discard, req.Body)
			return req.Header.Get(HeaderControlID), func() {
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
			}, nil
		}
	})
}

// An HTTP destination's lanes share its connections as an MLLP one's do: a
// feed keyed by patient has thousands of lanes, and each lane's head went
// out at once, a connection each, when such a destination came back after
// an outage. A lane that finds none free in time sends nothing (as MLLP:
// not an attempt) and the next message waits for the first to finish.
func TestHTTPSenderBoundsItsConcurrentRequests(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		arrived []string
	)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, r.Header.Get(HeaderControlID))
		mu.Unlock()
		if strings.HasPrefix(r.Header.Get(HeaderControlID), "HELD") {
			<-release
		}
	}))
	defer srv.Close()
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free() // before srv.Close, which waits for the held handlers
	seen := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(arrived) }
	o := httpOutbound(srv.URL)
	o.Connections = 2
	s := newTestHTTPSender(t, o)

	held := make(chan error, 2)
	for _, id := range []string{"HELD1", "HELD2"} {
		go func() { held <- s.Send(t.Context(), testMessage(id)) }()
	}
	waitFor(t, "both held requests to arrive", func() bool { return len(seen()) == 2 })

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err := s.Send(ctx, testMessage("THIRD"))
	if !errors.Is(err, errNotWritten) {
		t.Fatalf("a third concurrent POST with connections = 2: %v (the destination got %v); want it not sent (errNotWritten)", err, seen())
	}
	wantDeliveryError(t, err, false, "http api: no free connection (of 2) for queue id 42 within")

	// A send that waits gets the connection a finished one gives back.
	waiting := make(chan error, 1)
	go func() { waiting <- s.Send(t.Context(), testMessage("THIRD")) }()
	free()
	for range 2 {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-waiting; err != nil {
		t.Fatalf("THIRD after the held ones: %v", err)
	}
	if got := seen(); len(got) != 3 || got[2] != "THIRD" {
		t.Errorf("the destination got %v; want HELD1 and HELD2, then THIRD once", got)
	}
}

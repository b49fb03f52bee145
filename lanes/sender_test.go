package lanes

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
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

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
)

func TestNewSenderByType(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		o    config.Outbound
		want string
	}{
		{config.Outbound{Name: "a", Type: config.OutboundMLLP, Address: "127.0.0.1:2575"}, "*lanes.mllpSender"},
		{config.Outbound{Name: "b", Type: config.OutboundFile, Directory: "out"}, "*lanes.fileSender"},
		{config.Outbound{Name: "c", Type: config.OutboundHTTP, URL: "https://example.test/hl7"}, "*lanes.httpSender"},
	} {
		s, err := NewSender(tt.o)
		if err != nil {
			t.Fatalf("%s: %v", tt.o.Type, err)
		}
		if got := fmt.Sprintf("%T", s); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.o.Type, got, tt.want)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestNewSenderErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	for _, tt := range []struct {
		o    config.Outbound
		says string
	}{
		{config.Outbound{Name: "x", Type: "ftp"}, `outbound "x": type "ftp" is not one of mllp, file, http`},
		{config.Outbound{Name: "x", Type: "mllp", Address: "nohost"}, `outbound "x": address: want host:port`},
		{config.Outbound{Name: "x", Type: "mllp", Address: "h:0"}, `outbound "x": address: want host:port with a port from 1 to 65535, got "h:0"`},
		{config.Outbound{Name: "x", Type: "mllp", Address: "h:http"}, `outbound "x": address: want host:port with a port from 1 to 65535, got "h:http"`},
		{config.Outbound{Name: "x", Type: "mllp", Address: "h:1", TLSCA: notPEM}, "need tls = true (refusing to send in plaintext)"},
		{config.Outbound{Name: "x", Type: "mllp", Address: "h:1", ServerName: "h"}, "need tls = true"},
		{config.Outbound{Name: "x", Type: "mllp", Address: "h:1", TLS: true, TLSCA: filepath.Join(dir, "missing.pem")}, "tls_ca: open"},
		{config.Outbound{Name: "x", Type: "mllp", Address: "h:1", TLS: true, TLSCA: notPEM}, "holds no PEM certificate"},
		{config.Outbound{Name: "x", Type: "mllp", Address: "h:1", TLS: true, TLSCert: notPEM}, "tls_cert and tls_key go together"},
		{config.Outbound{Name: "x", Type: "mllp", Address: "h:1", TLS: true, TLSCert: notPEM, TLSKey: notPEM}, "tls_cert/tls_key:"},
		{config.Outbound{Name: "x", Type: "file"}, `outbound "x": directory: required`},
		{config.Outbound{Name: "x", Type: "http", URL: "ftp://h/x"}, "url: want an http:// or https:// URL"},
		{config.Outbound{Name: "x", Type: "http", URL: "http://"}, "url: want an http:// or https:// URL with a host"},
		{config.Outbound{Name: "x", Type: "http", URL: "http://h/x", TLSCA: notPEM}, "need an https:// url"},
		{config.Outbound{Name: "x", Type: "http", URL: "https://h/x", TLSCA: notPEM}, "holds no PEM certificate"},
	} {
		s, err := NewSender(tt.o)
		if err == nil || s != nil {
			t.Errorf("%+v: NewSender = %v, %v; want an error", tt.o, s, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.says) {
			t.Errorf("error %q does not say %q", err, tt.says)
		}
	}
}

// Whatever outbound the config accepts, the sender can be built from (short
// of TLS files it cannot read), and the rest the config refuses at load: a
// destination without a sender never delivers, and its messages pile up with
// one log line at start to say why.
func TestNewSenderBuildsWhatTheConfigAccepts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		outbound string
		valid    bool
	}{
		{"type = \"http\"\nurl = \"https://api.internal/hl7\"\n", true},
		{"type = \"http\"\nurl = \"HTTP://api.internal:8080\"\n", true},
		{"type = \"http\"\nurl = \"https://api.internal/hl7\"\ntls = true\nserver_name = \"api\"\n", true},
		{"type = \"http\"\nurl = \"http://api.internal/hl7\"\ntls = true\n", false},
		{"type = \"http\"\nurl = \"http://api.internal/hl7\"\ntls_key = \"k.pem\"\n", false},
		{"type = \"http\"\nurl = \"http://api.internal/hl7\"\nserver_name = \"api\"\n", false},
		{"type = \"http\"\nurl = \"https://api.internal/hl7\"\ntls_cert = \"c.pem\"\n", false},
		{"type = \"http\"\nurl = \"http:///hl7\"\n", false},
		{"type = \"http\"\nurl = \"http:api.internal\"\n", false},
		{"type = \"http\"\nurl = \"ftp://api.internal/hl7\"\n", false},
		{"type = \"http\"\nurl = \"https://api.internal/%zz\"\n", false},
		{"type = \"mllp\"\naddress = \"lab.internal:2576\"\n", true},
		{"type = \"mllp\"\naddress = \"lab.internal\"\n", false},
		{"type = \"mllp\"\naddress = \"lab.internal:99999\"\n", false},
		{"type = \"mllp\"\naddress = \"lab.internal:0\"\n", false},
		{"type = \"mllp\"\naddress = \"lab.internal:2576\"\ntls_key = \"k.pem\"\n", false},
		{"type = \"mllp\"\naddress = \"lab.internal:2576\"\nserver_name = \"lab\"\n", false},
		{"type = \"mllp\"\naddress = \"lab.internal:2576\"\ntls = true\ntls_cert = \"c.pem\"\n", false},
		{"type = \"file\"\ndirectory = \"out\"\n", true},
		{"type = \"file\"\n", false},
	} {
		toml := "[[inbound]]\nname = \"adt_in\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:2575\"\n" +
			"[[outbound]]\nname = \"dest\"\n" + tt.outbound +
			"[[route]]\nfrom = \"adt_in\"\nto = [\"dest\"]\n"
		c, err := config.Parse([]byte(toml), "mf.toml")
		if (err == nil) != tt.valid {
			t.Errorf("the config's verdict on\n%s(accepted %v, want %v): %v", tt.outbound, err == nil, tt.valid, err)
		}
		if err != nil {
			continue
		}
		s, err := NewSender(c.Outbound[0])
		if err != nil {
			t.Errorf("the config accepts\n%sbut NewSender refuses it: %v", tt.outbound, err)
			continue
		}
		s.Close()
	}
}

func TestDeliveryError(t *testing.T) {
	t.Parallel()
	cause := fs.ErrPermission
	e := retryableError(cause, "file %s: queue id %d", "drop", 7)
	if e.Error() != "file drop: queue id 7: permission denied" || !errors.Is(e, fs.ErrPermission) || e.Permanent {
		t.Errorf("retryable: %q, permanent %v", e, e.Permanent)
	}
	p := permanentError(nil, "rejected")
	if p.Error() != "rejected" || !p.Permanent || p.Unwrap() != nil {
		t.Errorf("permanent: %q", p)
	}
	wrapped := fmt.Errorf("lane: %w", p)
	if !IsPermanent(wrapped) || IsPermanent(e) || IsPermanent(errors.New("x")) || IsPermanent(nil) {
		t.Error("IsPermanent")
	}
}

// A queue row records the destination's own words apart from the rest, so
// that a monitoring token reads the one without the other.
func TestRecordedKeepsTheDestinationsWordsApart(t *testing.T) {
	t.Parallel()
	de := &DeliveryError{Reason: "mllp lab: AR", Detail: "unknown patient M\xdcLLER", Err: errors.New("conn reset")}
	for _, tt := range []struct {
		err          error
		text, detail string
	}{
		{errors.New("refused"), "refused", ""},
		{&DeliveryError{Reason: "no detail"}, "no detail", ""},
		{de, "mllp lab: AR: conn reset", "unknown patient M\uFFFDLLER"},
		{fmt.Errorf("send: %w", de), "send: mllp lab: AR: conn reset", "unknown patient M\uFFFDLLER"},
	} {
		if text, detail := recorded(tt.err); text != tt.text || detail != tt.detail {
			t.Errorf("recorded(%q) = %q, %q; want %q, %q", tt.err, text, detail, tt.text, tt.detail)
		}
	}
}

// A TLS failure the destination's config can cure says which key to set:
// net/http and crypto/tls name the failure, not the setting that fixes it.
func TestTLSFailuresSayWhatToSet(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
	other := newTestPKI(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
	named := newTestPKI(t, []string{"partner.example"}, nil)
	httpsServer := func(cfg *tls.Config) string {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		srv.TLS = cfg
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes fail: that is the test
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	mtls := pki.serverTLS()
	mllpUnknown, mllpNamed := startReceiver(t, mtls, nil), startReceiver(t, named.serverTLS(), nil)
	httpsURL, httpsNamedURL := httpsServer(mtls), httpsServer(named.serverTLS())
	for _, tt := range []struct {
		name string
		o    config.Outbound
		says string
	}{
		{"mllp, a CA not trusted", config.Outbound{Name: "lab", Type: config.OutboundMLLP, Address: mllpUnknown.addr, TLS: true, TLSCA: other.caFile, TLSCert: pki.clientCert, TLSKey: pki.clientKey}, "set tls_ca"},
		{"mllp, another host's certificate", config.Outbound{Name: "lab", Type: config.OutboundMLLP, Address: mllpNamed.addr, TLS: true, TLSCA: named.caFile, TLSCert: named.clientCert, TLSKey: named.clientKey}, "set server_name"},
		{"mllp, no client certificate", config.Outbound{Name: "lab", Type: config.OutboundMLLP, Address: mllpUnknown.addr, TLS: true, TLSCA: pki.caFile}, "tls_cert and tls_key"},
		{"http, a CA not trusted", config.Outbound{Name: "api", Type: config.OutboundHTTP, URL: httpsURL, TLSCA: other.caFile, TLSCert: pki.clientCert, TLSKey: pki.clientKey}, "set tls_ca"},
		{"http, another host's certificate", config.Outbound{Name: "api", Type: config.OutboundHTTP, URL: httpsNamedURL, TLSCA: named.caFile, TLSCert: named.clientCert, TLSKey: named.clientKey}, "set server_name"},
		{"http, no client certificate", config.Outbound{Name: "api", Type: config.OutboundHTTP, URL: httpsURL, TLSCA: pki.caFile}, "tls_cert and tls_key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.TimeoutSeconds, tt.o.RetryBaseSeconds, tt.o.RetryMaxSeconds = 5, 0.05, 1
			s, err := NewSender(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Send(t.Context(), testMessage("MSG1"))
			wantDeliveryError(t, err, false, tt.says)
			// Nothing reached the receiver's application: no attempt.
			wantNotWritten(t, err)
		})
	}
}

// closingReceiver listens for a destination that answers the first request
// of each connection and closes the connection after reading the next one,
// unanswered: one that takes a message per connection and closes a moment
// after its answer. reader returns, for a new connection, a function that
// reads its next request and returns the request's control id and the
// function that answers it. seen reports the control ids read, in order,
// and the connections accepted.
func closingReceiver(t *testing.T, reader func(c net.Conn) func() (id string, answer func(), err error)) (addr string, seen func() (received []string, accepted int)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var (
		mu       sync.Mutex
		accepted int
		received []string
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
			go func() {
				defer c.Close()
				next := reader(c)
				for n := 0; ; n++ {
					id, answer, err := next()
					if err != nil {
						return
					}
					mu.Lock()
					received = append(received, id)
					mu.Unlock()
					if n > 0 {
						return
					}
					answer()
				}
			}()
		}
	}()
	return ln.Addr().String(), func() ([]string, int) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(received), accepted
	}
}

// A message whose Outgoing.MayWrite says no at the last moment leaves by no
// sender: nothing reaches the destination, and the error is ErrDistrusted
// (the lane gives the row back, still its head, with no attempt). The MLLP
// sender asks once it has a connection, which its Send may wait for while
// another lane's message holds it: a process frozen then must not write on
// waking. Each sender's next message goes as usual (MLLP: on the same
// connection).
func TestASenderWritesNothingWhenMayWriteSaysNo(t *testing.T) {
	t.Parallel()
	distrustedMessage := func(controlID string) Outgoing {
		m := testMessage(controlID)
		m.MayWrite = func() bool { return false }
		return m
	}
	wantDistrusted := func(t *testing.T, err error) {
		t.Helper()
		var de *DeliveryError
		if !errors.Is(err, ErrDistrusted) || !errors.As(err, &de) || de.Permanent {
			t.Fatalf("Send: %v; want a retryable DeliveryError that is ErrDistrusted", err)
		}
	}

	t.Run("mllp, after waiting for the connection", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		r := startReceiver(t, nil, func(m *hl7.Message) answer {
			if m.ControlID() == "SLOW" {
				<-release
			}
			return answer{}
		})
		s := newTestMLLPSender(t, mllpOutbound(r.addr)) // one connection
		slow := make(chan error, 1)
		go func() { slow <- s.Send(t.Context(), testMessage("SLOW")) }()
		waitFor(t, "the slow message to arrive", func() bool { _, _, rec := r.stats(); return len(rec) == 1 })
		doubted := make(chan error, 1)
		go func() { doubted <- s.Send(t.Context(), distrustedMessage("DOUBTED")) }()
		close(release)
		if err := <-slow; err != nil {
			t.Fatal(err)
		}
		wantDistrusted(t, <-doubted)
		if err := s.Send(t.Context(), testMessage("NEXT")); err != nil {
			t.Fatal(err)
		}
		if accepted, _, received := r.stats(); accepted != 1 || strings.Join(received, ",") != "SLOW,NEXT" {
			t.Fatalf("%d connections, received %v; want SLOW,NEXT on one connection", accepted, received)
		}
	})

	// A reused connection the receiver closed after the frame was written
	// has carried the message once: if the trust window closes before it
	// is sent again on a new connection, the send is that failed attempt
	// (retryable, counted), not ErrDistrusted (given back as never sent).
	t.Run("mllp, after a reused connection carried it", func(t *testing.T) {
		t.Parallel()
		r := startReceiver(t, nil, func(m *hl7.Message) answer { return answer{drop: m.ControlID() == "ONCE"} })
		wantTheFirstWriteTheAttempt(t, newTestMLLPSender(t, mllpOutbound(r.addr)), func() []string { _, _, rec := r.stats(); return rec })
	})

	// The same for HTTP: the POST sent again at once on a new connection,
	// after a reused one closed without answering, asks again first.
	t.Run("http, after a reused connection carried it", func(t *testing.T) {
		t.Parallel()
		addr, seen := httpClosingReceiver(t)
		wantTheFirstWriteTheAttempt(t, newTestHTTPSender(t, httpOutbound("http://"+addr)), func() []string { rec, _ := seen(); return rec })
	})

	t.Run("http", func(t *testing.T) {
		t.Parallel()
		var posts atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			posts.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
		}))
		defer srv.Close()
		s := newTestHTTPSender(t, httpOutbound(srv.URL))
		wantDistrusted(t, s.Send(t.Context(), distrustedMessage("DOUBTED")))
		if n := posts.Load(); n != 0 {
			t.Fatalf("%d requests reached the destination; want none", n)
		}
		if err := s.Send(t.Context(), testMessage("NEXT")); err != nil || posts.Load() != 1 {
			t.Fatalf("next Send: %v, %d requests; want delivered", err, posts.Load())
		}
	})

	t.Run("file", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "out")
		s := newTestFileSender(t, dir)
		wantDistrusted(t, s.Send(t.Context(), distrustedMessage("DOUBTED")))
		if names := listDir(t, dir); len(names) != 0 {
			t.Fatalf("directory holds %v; want nothing, not even a temporary file", names)
		}
		if err := s.Send(t.Context(), testMessage("NEXT")); err != nil || len(listDir(t, dir)) != 1 {
			t.Fatalf("next Send: %v, directory %v; want its file", err, listDir(t, dir))
		}
	})
}

// wantTheFirstWriteTheAttempt sends FIRST, then ONCE, whose MayWrite says
// yes to its first write only, through a sender whose receiver lets the
// connection that carried FIRST close as ONCE arrives on it: ONCE is not
// written again, and its Send is the failed attempt (retryable), not
// ErrDistrusted. received reads what the receiver got.
func wantTheFirstWriteTheAttempt(t *testing.T, s Sender, received func() []string) {
	t.Helper()
	if err := s.Send(t.Context(), testMessage("FIRST")); err != nil {
		t.Fatal(err)
	}
	m := testMessage("ONCE")
	var asked atomic.Int32
	m.MayWrite = func() bool { return asked.Add(1) == 1 } // yes for the first write only
	err := s.Send(t.Context(), m)
	var de *DeliveryError
	if err == nil || errors.Is(err, ErrDistrusted) || !errors.As(err, &de) || de.Permanent {
		t.Fatalf("Send: %v; want a retryable DeliveryError that is not ErrDistrusted", err)
	}
	if got := received(); strings.Join(got, ",") != "FIRST,ONCE" {
		t.Fatalf("received %v; want FIRST,ONCE", got)
	}
}

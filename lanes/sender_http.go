package lanes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/internal/tlsfiles"
)

// HTTP sender protocol.
const (
	// HL7ContentType is the Content-Type of a message POSTed by the HTTP
	// sender: HL7 v2 in its traditional encoding (ER7).
	HL7ContentType = "x-application/hl7-v2+er7"
	// HeaderQueueID carries the queue row's ID: a receiver can use it to
	// recognise a redelivery (delivery is at least once).
	HeaderQueueID = "X-MF-Queue-ID"
	// HeaderControlID carries the message's control ID (MSH-10).
	HeaderControlID = "X-MF-Control-ID"
	// httpDrainMax bounds how much of a response body is read (and
	// discarded) so that the connection can be reused.
	httpDrainMax = 64 << 10
	// httpDrainWait bounds how long the body is read: the status is the
	// destination's answer, and a body that never ends (a streaming
	// endpoint, a broken proxy) held each send until timeout_seconds. Past
	// it the connection is closed instead of kept.
	httpDrainWait = time.Second
)

// httpSender POSTs each message to a URL (DESIGN §7): a 2xx answer is a
// delivery; 408, 425, 429, 5xx and transport errors are retried; any other
// answer (other 4xx, and 3xx: redirects are not followed, since a POST
// must not silently turn into a GET) is permanent.
type httpSender struct {
	name      string
	url       string
	shownURL  string // url for errors: config.CleanURL
	timeout   time.Duration
	client    *http.Client
	transport *http.Transport
	// slots bounds the requests in flight to the destination's
	// connections: one token each, taken for a POST and given back after.
	// A keyed feed has a lane per patient, and without a bound every
	// lane's head went out at once, a connection each (a destination back
	// from an outage met thousands).
	slots chan struct{}
	// backoff spaces out connections to an unreachable destination, as
	// the MLLP sender's dials: shared by its lanes, so that a destination
	// that is down is not polled by each of them at retry_base_seconds.
	backoff *dialBackoff
	// cert is the client certificate (tls_cert, tls_key) as on disk, or
	// nil; setLog gives it the destination's logger for its renewals.
	cert *tlsfiles.Pair
}

// tlsCert is the sender's client certificate as on disk, or nil.
func (s *httpSender) tlsCert() *tlsfiles.Pair { return s.cert }

// setLog gives the sender the logger of its destination.
func (s *httpSender) setLog(log zerolog.Logger) {
	if s.cert != nil {
		s.cert.SetLog(log)
	}
}

// newHTTPSender builds the sender of o. config.Validate makes the same
// checks, so that of a loaded config only a TLS file that cannot be read
// fails it.
func newHTTPSender(o config.Outbound) (*httpSender, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		// Not %w: url.Parse quotes the whole URL, password included.
		return nil, errors.New("url: not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url: want an http:// or https:// URL with a host")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// No proxy from the environment: mf reads its settings from the config
	// file only, and PHI goes where the file says.
	tr.Proxy = nil
	// One host, sent to by the destination's lanes at once, up to
	// connections of them: keep a connection each for the next messages
	// (net/http keeps 2 a host, and opened, with https handshook, a
	// connection per message beyond them).
	n := o.Connections
	if n < 1 { // an Outbound not from config.Parse
		n = config.DefaultHTTPConnections
	}
	tr.MaxIdleConnsPerHost = n
	tr.MaxConnsPerHost = n
	var cert *tlsfiles.Pair
	if o.TLS || o.TLSCA != "" || o.TLSCert != "" || o.TLSKey != "" || o.ServerName != "" {
		if u.Scheme != "https" {
			return nil, errors.New("tls_ca, tls_cert, tls_key and server_name need an https:// url (refusing to send in plaintext)")
		}
		cfg, pair, err := outboundTLS(o)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig, cert = cfg, pair
	}
	return &httpSender{
		cert:      cert,
		name:      o.Name,
		url:       o.URL,
		shownURL:  config.CleanURL(o.URL),
		timeout:   sendTimeout(o),
		transport: tr,
		slots:     make(chan struct{}, n),
		backoff:   newDialBackoff(o.RetryBase(), o.RetryMax()),
		client: &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}, nil
}

// Send implements Sender.
func (s *httpSender) Send(ctx context.Context, m Outgoing) error {
	ctx, cancel := withSendDeadline(ctx, s.timeout)
	defer cancel()
	if next, last, ok := s.backoff.allow(); !ok {
		// A POST of another lane got no connection just now: this one
		// connects to nothing and writes nothing, so it is no attempt; the
		// lane waits for the next try rather than poll.
		de := retryableError(fmt.Errorf("%w: %w", errNotWritten, last), "http %s: %s unreachable; next connection allowed at %s (in %s); not sent",
			s.name, s.shownURL, next.Format("15:04:05.000"), time.Until(next).Round(time.Millisecond))
		de.RetryAfter = time.Until(next)
		return de
	}
	if err := s.take(ctx, m.QueueID); err != nil {
		return err
	}
	defer func() { <-s.slots }()
	if !m.mayWrite() {
		return distrusted("http", s.name, m)
	}
	resp, connected, onlyNew, err := s.post(ctx, m)
	if err != nil {
		var de *DeliveryError
		if errors.As(err, &de) {
			return de
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			// net/http names the URL as given, with its query and user (it
			// masks only the password).
			shown := *ue
			shown.URL = s.shownURL
			err = &shown
		}
		if (!connected || (onlyNew && tlsRefused(err))) && !errors.Is(ctx.Err(), context.Canceled) {
			// No connection, so nothing of the request was written (refused,
			// unreachable, a TLS handshake that failed): no attempt, as for
			// MLLP; counted, a destination down for a few tries used up
			// max_attempts and set each head aside, or held it, in turn.
			// So with a new connection whose TLS the server refused after
			// the client's side of the handshake ended (TLS 1.3 and a
			// client certificate it refuses): the request went out, but no
			// application took any of it. (Our own cancellation says
			// nothing about the destination.)
			return s.backoff.notWritten(err, "http %s: connecting for queue id %d (control id %q) failed; next connection in %s",
				s.name, m.QueueID, m.ControlID)
		}
		// Transport errors (refused, reset, TLS, timeout) may all pass.
		// Matched on net/http's own words, not on the whole error, whose
		// text holds the URL: one with "malformed" in its path made every
		// timeout or reset read as a reply that is not HTTP.
		if inner := transportError(err); strings.Contains(inner, "malformed HTTP") || strings.Contains(inner, "malformed MIME header") {
			// A reply that is not HTTP, which net/http quotes: it may be
			// anything of the message (an HL7 ACK, say), so it is the
			// destination's detail, kept out of logs (forLog).
			return &DeliveryError{Reason: fmt.Sprintf("http %s: the reply to queue id %d (control id %q) is not HTTP", s.name, m.QueueID, m.ControlID), Detail: err.Error()}
		}
		return withTLSAdvice(retryableError(err, "http %s: POST of queue id %d (control id %q) failed", s.name, m.QueueID, m.ControlID))
	}
	drained := time.AfterFunc(httpDrainWait, cancel) // cancelling ctx ends the read
	_, _ = io.CopyN(io.Discard, resp.Body, httpDrainMax)
	drained.Stop()
	_ = resp.Body.Close()

	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		return nil
	}
	// The status code only: the reason phrase is the destination's own text
	// ("422 Unknown patient …"), its detail, kept out of logs (forLog).
	de := &DeliveryError{
		Permanent: !httpRetryable(code),
		Reason:    fmt.Sprintf("http %s: %s answered %d to queue id %d (control id %q)", s.name, s.shownURL, code, m.QueueID, m.ControlID),
		Detail:    strings.TrimSpace(strings.TrimPrefix(resp.Status, strconv.Itoa(code))),
	}
	if !de.Permanent {
		de.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		if de.RetryAfter > 0 {
			de.Reason += fmt.Sprintf(", asking for a retry in %s", de.RetryAfter)
		}
	}
	return de
}

// take waits for a free connection as the MLLP sender does (mllpSender):
// only while half of the send's budget is left, so that a request has time
// for its answer; past that nothing is sent (errNotWritten), which the lane
// does not count as an attempt.
func (s *httpSender) take(ctx context.Context, queueID int64) error {
	writeBy, budget := latestWrite(ctx, s.timeout)
	waitLimit := time.NewTimer(time.Until(writeBy))
	defer waitLimit.Stop()
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-waitLimit.C:
		return retryableError(errNotWritten, "http %s: no free connection (of %d) for queue id %d within %s, half of its %s; not sent, so not a duplicate when retried",
			s.name, cap(s.slots), queueID, (budget / 2).Round(time.Millisecond), budget.Round(time.Millisecond))
	case <-ctx.Done():
		return retryableError(fmt.Errorf("%w: %w", errNotWritten, ctx.Err()), "http %s: no free connection (of %d) for queue id %d; not sent", s.name, cap(s.slots), queueID)
	}
}

// post POSTs m. A connection used before that the destination closes
// without answering (one that closes keep-alive connections a moment after
// its answer, without Connection: close; an idle timeout crossing the
// request) is replaced by a new one, at once, once: net/http sends a POST
// again itself only if none of it was written. A lane's retry sent it
// again too, but after its backoff, and counted an attempt.
//
// connected says whether it got a connection: without one, nothing of the
// request was written. One got resets the destination's backoff. onlyNew
// says that the request went on a new connection only: none that had
// carried requests before, which it may have reached before it was sent
// again.
func (s *httpSender) post(ctx context.Context, m Outgoing) (resp *http.Response, connected, onlyNew bool, err error) {
	for resent := false; ; resent = true {
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) {
			reused, connected = c.Reused, true
			s.backoff.succeeded()
		}}
		var req *http.Request
		req, err = http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, s.url, bytes.NewReader(m.Payload))
		if err != nil {
			return nil, false, false, permanentError(err, "http %s: building the request for queue id %d", s.name, m.QueueID)
		}
		req.Header.Set("Content-Type", HL7ContentType)
		req.Header.Set("User-Agent", "mf")
		req.Header.Set(HeaderQueueID, strconv.FormatInt(m.QueueID, 10))
		req.Header.Set(HeaderControlID, headerSafe(m.ControlID))
		resp, err = s.client.Do(req)
		if err != nil && !resent && reused && ctx.Err() == nil && closedByReceiver(err) {
			// Asked again, as before any write: the first exchange took a
			// whole round trip, and a node frozen in it may have lost its
			// lease meanwhile while its term's context is not yet
			// cancelled; sent again now, the row would reach the
			// destination after the new primary's newer ones. Not sent
			// again, the first write is the attempt that failed.
			if !m.mayWrite() {
				return resp, connected, false, err
			}
			continue
		}
		return resp, connected, !reused && !resent, err
	}
}

// retryAfter reads a Retry-After header (RFC 9110 §10.2.3): seconds, or an
// HTTP date, as the wait from now. Absent, unreadable or past: zero.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now).Round(time.Second)
	}
	return 0
}

// httpRetryable reports whether an answer that is not 2xx may pass: the
// server timed out (408), refused to risk a replay for now (425, Too Early:
// RFC 8470 invites the client to send again), is overloaded (429) or failed
// (5xx). Any other answer is about the request itself.
func httpRetryable(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return code >= 500
}

// headerSafe replaces what an HTTP header value cannot carry (control
// characters) so that an odd control ID never fails the request.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// Close implements Sender: idle connections are closed.
func (s *httpSender) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// transportError is the text of err without the method and URL net/http's
// *url.Error puts before it.
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

package lanes

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
)

// Sender delivers messages to one destination ([[outbound]]). Send is safe for concurrent use by the destination's lane actors; each lane sends one message at a time.
type Sender interface {
	// Send delivers m once. nil: delivered (the destination accepted it);
	// else a *DeliveryError. A Send without a deadline on ctx is bounded by
	// the destination's timeout_seconds.
	Send(ctx context.Context, m Outgoing) error // nil: delivered (the destination accepted it); else a *DeliveryError
	// Close releases the sender's connections; a Send in progress fails
	// (retryably) and later ones fail at once.
	Close() error
}

// Outgoing is one message to deliver.
type Outgoing struct {
	// QueueID is the mf_queue row being delivered: the file sender names
	// its file after it, the HTTP sender sends it in X-MF-Queue-ID.
	QueueID int64
	// ControlID is the message's MSH-10, raw, as hl7.Message.ControlID
	// returns it; the MLLP sender checks that the ACK's MSA-2 matches it.
	ControlID string
	// Payload is the message as received, byte for byte. It is never put in
	// an error or a log line (PHI).
	Payload []byte
	// MayWrite, if set, is asked at the last moment before the message
	// leaves: before the MLLP frame's write (once a connection is in hand),
	// before the HTTP request (once its connection slot is; net/http's dial
	// and handshake come after), before the file is renamed into place.
	// False, and nothing is sent: Send returns an error that is
	// ErrDistrusted. The lanes pass the leadership trust
	// window: a process frozen while it waited for a connection (SIGSTOP,
	// a VM pause) must not send on waking, when the next leader may have
	// delivered the row and the rows behind it already.
	MayWrite func() bool
}

// mayWrite reports whether m may leave now (Outgoing.MayWrite).
func (m Outgoing) mayWrite() bool { return m.MayWrite == nil || m.MayWrite() }

// ErrDistrusted fails a Send whose Outgoing.MayWrite said no: nothing was
// sent.
var ErrDistrusted = errors.New("leadership in doubt right before the message would have left: not sent")

// distrusted is the error of a Send that m.MayWrite stopped: retryable,
// and no attempt at the destination.
func distrusted(kind, name string, m Outgoing) *DeliveryError {
	return retryableError(ErrDistrusted, "%s %s: queue id %d (control id %q)", kind, name, m.QueueID, m.ControlID)
}

// DeliveryError says why a delivery failed and whether retrying may help.
type DeliveryError struct {
	// Permanent is true when retrying the same message cannot succeed (the
	// destination rejected it: AR/CR, HTTP 4xx); the lane applies
	// on_exhausted at once. False: retry later with backoff.
	Permanent bool
	// Reason says what failed, naming the destination; it never holds
	// payload bytes.
	Reason string
	// Err is the underlying error, if any.
	Err error
	// Detail is the destination's own explanation (an ACK's text or error
	// message). It may echo the message's fields, so it goes into the queue
	// row (read under MESSAGE_READ) but into logs only with log_payloads.
	Detail string
	// RetryAfter is how long the destination asked to be left alone (HTTP
	// Retry-After), zero if it did not say: a retry waits at least this
	// long, up to retry_max_seconds.
	RetryAfter time.Duration
}

// Error is the full reason, with the destination's detail (a queue row
// records the two apart: recorded).
func (e *DeliveryError) Error() string {
	s := e.Reason
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// forLog returns err as a log line may show it: without a DeliveryError's
// Detail unless withDetail (config log_payloads).
func forLog(err error, withDetail bool) error {
	var de *DeliveryError
	if withDetail || !errors.As(err, &de) || de.Detail == "" {
		return err
	}
	redacted := *de
	redacted.Detail = ""
	redacted.Reason += " (the destination's explanation is in the queue row: GET /messages/{id})"
	return &redacted
}

func (e *DeliveryError) Unwrap() error { return e.Err }

// recorded is how a queue row records a failed send: text, which any
// monitoring token reads (GET /lanes), and apart from it the destination's
// own explanation (DeliveryError.Detail), which only MESSAGE_READ does. Both
// are stored as valid UTF-8: a reply may be in any character set.
func recorded(err error) (text, detail string) {
	var de *DeliveryError
	if !errors.As(err, &de) || de.Detail == "" {
		return storage.ValidText(err.Error()), ""
	}
	plain := *de
	plain.Detail = ""
	// err may wrap de: keep what the wrapping says.
	text = strings.Replace(err.Error(), de.Error(), plain.Error(), 1)
	return storage.ValidText(text), storage.ValidText(de.Detail)
}

// IsPermanent reports whether err is a *DeliveryError marked permanent.
func IsPermanent(err error) bool {
	var de *DeliveryError
	return errors.As(err, &de) && de.Permanent
}

// retryable returns a DeliveryError that retrying may cure.
func retryableError(err error, format string, args ...any) *DeliveryError {
	return &DeliveryError{Reason: fmt.Sprintf(format, args...), Err: err}
}

// permanent returns a DeliveryError that retrying cannot cure.
func permanentError(err error, format string, args ...any) *DeliveryError {
	return &DeliveryError{Permanent: true, Reason: fmt.Sprintf(format, args...), Err: err}
}

// withTLSAdvice adds to de's reason what to change in the destination's
// config when its error is a TLS failure the config can cure: crypto/tls
// names the failure, not the setting. de is returned.
func withTLSAdvice(de *DeliveryError) *DeliveryError {
	if a := tlsAdvice(de.Err); a != "" {
		de.Reason += " (" + a + ")"
	}
	return de
}

// tlsAdvice says what cures err, a failed TLS handshake, or "".
func tlsAdvice(err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
	)
	switch {
	case errors.As(err, &unknown):
		return "the destination's certificate is not signed by a CA this node trusts: set tls_ca to the PEM file of the CA that signed it"
	case errors.As(err, &hostname):
		return "the destination's certificate is not for the host dialled: set server_name to a name the certificate holds, or dial that name"
	case tlsRefused(err):
		// The server's alert: it wants a client certificate, or refused ours.
		return "the destination refused this node's client certificate or wants one: set tls_cert and tls_key to a certificate it trusts"
	}
	return ""
}

// tlsRefused reports whether err is the server's TLS alert that it wants
// a client certificate or refused this node's (tlsAdvice).
func tlsRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error" && strings.Contains(op.Err.Error(), "certificate")
}

// closedByReceiver reports whether err, of a send on a connection, says the
// receiver closed the connection without answering: an end of stream
// before any answer, a reset, a broken pipe. Not an answer cut off
// (io.ErrUnexpectedEOF): the receiver was answering.
func closedByReceiver(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Defaults for an Outbound that config.Parse did not fill in (built in code).
const (
	defaultSendTimeout = 30 * time.Second
	defaultRetryBase   = time.Second
	defaultRetryMax    = 5 * time.Minute
)

// NewSender returns the Sender for o, by o.Type: "mllp", "file" or "http".
// It checks what it needs of o (addresses, TLS files) and errors name the
// outbound; it opens no connection.
func NewSender(o config.Outbound) (Sender, error) {
	var (
		s   Sender
		err error
	)
	switch o.Type {
	case config.OutboundMLLP:
		s, err = newMLLPSender(o)
	case config.OutboundFile:
		s, err = newFileSender(o)
	case config.OutboundHTTP:
		s, err = newHTTPSender(o)
	default:
		err = fmt.Errorf("type %q is not one of mllp, file, http", o.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("outbound %q: %w", o.Name, err)
	}
	return s, nil
}

// sendTimeout is o's delivery timeout, defaulted.
func sendTimeout(o config.Outbound) time.Duration {
	if d := o.Timeout(); d > 0 {
		return d
	}
	return defaultSendTimeout
}

// withSendDeadline bounds ctx by timeout unless it already has a deadline.
func withSendDeadline(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

// latestWrite is when a send on ctx (bounded by withSendDeadline) must have
// begun to write, with its budget (timeout, or less if ctx's deadline is
// sooner): half of the budget is left for the answer. A send still waiting
// for a connection then gives up with nothing written (errNotWritten):
// written with less, it would time out before its answer and be sent again.
func latestWrite(ctx context.Context, timeout time.Duration) (by time.Time, budget time.Duration) {
	deadline, _ := ctx.Deadline()
	budget = max(0, min(timeout, time.Until(deadline)))
	return deadline.Add(-budget / 2), budget
}

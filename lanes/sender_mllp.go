package lanes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
)

// mllpMaxAckBytes bounds a receiver's reply; an ACK is a few hundred bytes.
const mllpMaxAckBytes = 1 << 20

// mllpReasonMax bounds the receiver's text quoted in a DeliveryError.
const mllpReasonMax = 200

var (
	// errSenderClosed fails a Send on a closed sender.
	errSenderClosed = errors.New("sender closed")
	// errIdleConnDead: a pooled connection was found closed (or sending
	// unsolicited data) before anything was written on it.
	errIdleConnDead = errors.New("idle connection closed by the receiver")
	// errNotWritten fails a Send that gave up before writing the message:
	// too little of its time was left to hear the ACK (see mllpSender), or
	// the receiver is unreachable and its next dial not due yet. The
	// receiver has not seen it, so it is no attempt, and retrying it is no
	// duplicate.
	errNotWritten = errors.New("not written")
)

// mllpSender delivers to an MLLP receiver over a pool of persistent
// connections (DESIGN §7).
//
// The pool is a channel of slots, one per allowed connection: a slot holds a
// live connection or nil (not dialled yet, or closed after a failure). Send
// takes a slot, dials it if empty, exchanges one message and its ACK, and
// puts the slot back; so at most Connections messages are in flight, each
// connection carries one at a time, and connections are dialled lazily and
// reused.
//
// Each connection has a reader goroutine that hands every frame (or error)
// it reads to the Send in progress. While the connection is idle this also
// notices a receiver that closed it (idle timeout, restart): the next Send
// dials again at once instead of failing on a dead socket.
//
// One deadline bounds the whole Send, the wait for a slot included (the
// lane's deadline is timeout_seconds, which the row's lease is sized for).
// A message written with too little of it left would be written, time out
// before its ACK, and be sent again: a duplicate, and a closed connection.
// So a Send writes only while at least half of its budget is left (budget:
// timeout_seconds, or less if ctx's deadline is sooner); past that it gives
// up, with nothing written (errNotWritten). Half, not the time an exchange
// was seen to take: a fixed share is what an operator can reason about
// (set timeout_seconds to twice the receiver's slowest ACK), and a Send
// that finds a connection free at once still has the whole budget.
type mllpSender struct {
	name, addr string
	timeout    time.Duration
	dial       func(ctx context.Context) (net.Conn, error)
	backoff    *dialBackoff

	slots  chan *mllpConn
	ctx    context.Context // cancelled by Close: aborts every Send
	cancel context.CancelFunc
	once   sync.Once
}

func newMLLPSender(o config.Outbound) (*mllpSender, error) {
	if _, _, err := net.SplitHostPort(o.Address); err != nil {
		return nil, fmt.Errorf("address: want host:port: %w", err)
	}
	nd := &net.Dialer{KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context) (net.Conn, error) { return nd.DialContext(ctx, "tcp", o.Address) }
	if o.TLS {
		cfg, err := OutboundTLSConfig(o)
		if err != nil {
			return nil, err
		}
		td := &tls.Dialer{NetDialer: nd, Config: cfg}
		dial = func(ctx context.Context) (net.Conn, error) { return td.DialContext(ctx, "tcp", o.Address) }
	} else if o.TLSCA != "" || o.TLSCert != "" || o.TLSKey != "" || o.ServerName != "" {
		return nil, errors.New("tls_ca, tls_cert, tls_key and server_name need tls = true (refusing to send in plaintext)")
	}
	n := max(o.Connections, 1)
	s := &mllpSender{
		name:    o.Name,
		addr:    o.Address,
		timeout: sendTimeout(o),
		dial:    dial,
		backoff: newDialBackoff(o.RetryBase(), o.RetryMax()),
		slots:   make(chan *mllpConn, n),
	}
	for range n {
		s.slots <- nil
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// OutboundTLSConfig is the client TLS configuration of o: TLS 1.2 or later,
// the roots from tls_ca (default: the system's), the client certificate
// tls_cert/tls_key, the server_name override.
func OutboundTLSConfig(o config.Outbound) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca: %s holds no PEM certificate", o.TLSCA)
		}
		cfg.RootCAs = pool
	}
	if o.TLSCert != "" || o.TLSKey != "" {
		if o.TLSCert == "" || o.TLSKey == "" {
			return nil, errors.New("tls_cert and tls_key go together")
		}
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("tls_cert/tls_key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Send implements Sender: one message, one ACK.
func (s *mllpSender) Send(ctx context.Context, m Outgoing) error {
	frame, err := hl7.AppendFrame(nil, m.Payload)
	if err != nil {
		return permanentError(err, "mllp %s: queue id %d cannot be sent over MLLP", s.name, m.QueueID)
	}
	want := m.ControlID
	if want == "" || strings.ContainsRune(want, utf8.RuneError) {
		// None stored, or stored as valid UTF-8 (storage.ValidText): the
		// ACK echoes the bytes as sent.
		if msg, err := hl7.Parse(m.Payload); err == nil {
			want = msg.ControlID()
		}
	}

	ctx, cancel := withSendDeadline(ctx, s.timeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel) // Close aborts the Send
	defer stop()
	deadline, _ := ctx.Deadline()
	budget := max(0, min(s.timeout, time.Until(deadline)))
	writeBy := deadline.Add(-budget / 2) // see mllpSender
	waitLimit := time.NewTimer(time.Until(writeBy))
	defer waitLimit.Stop()
	tooLate := func(dialled bool) *DeliveryError {
		if dialled {
			return retryableError(errNotWritten, "mllp %s: connected to %s too late for queue id %d: less than half of its %s left; not sent, so not a duplicate when retried",
				s.name, s.addr, m.QueueID, budget.Round(time.Millisecond))
		}
		return retryableError(errNotWritten, "mllp %s: no free connection (of %d) for queue id %d within %s, half of its %s; not sent, so not a duplicate when retried",
			s.name, cap(s.slots), m.QueueID, (budget / 2).Round(time.Millisecond), budget.Round(time.Millisecond))
	}

	var c *mllpConn
	select {
	case c = <-s.slots:
	case <-s.ctx.Done():
		return retryableError(errSenderClosed, "mllp %s: queue id %d not sent", s.name, m.QueueID)
	case <-waitLimit.C:
		return tooLate(false)
	case <-ctx.Done():
		if s.ctx.Err() != nil {
			// Closed: the AfterFunc above cancelled ctx too, and select
			// picks among ready cases at random.
			return retryableError(errSenderClosed, "mllp %s: queue id %d not sent", s.name, m.QueueID)
		}
		return retryableError(ctx.Err(), "mllp %s: no free connection (of %d) for queue id %d", s.name, cap(s.slots), m.QueueID)
	}
	defer func() { s.slots <- c }() // c is nil once closed

	dialled := false
	for {
		fresh := c == nil
		if fresh {
			nc, derr := s.connect(ctx)
			if derr != nil {
				return derr
			}
			c = newMLLPConn(nc)
			dialled = true
		}
		if time.Now().After(writeBy) {
			// The wait, or a slow dial, ate the time; a new connection is
			// kept for the next Send.
			return tooLate(dialled)
		}
		reply, err := c.exchange(ctx, frame)
		if err != nil {
			c.close()
			unended := c.fr.AwaitingCR() // the reader has stopped: safe to ask
			c = nil
			if errors.Is(err, errIdleConnDead) && !fresh {
				continue // nothing was written: send on a new connection
			}
			var early *earlyReply
			if errors.As(err, &early) {
				// Not all of the message was written, so an acceptance
				// counts for nothing, nor does a reply out of step; a
				// refusal, or an error for this control ID, is the
				// receiver's word on it.
				if j := s.judge(early.payload, want, m.QueueID); j != nil && (j.Permanent || !j.closeConn) {
					j.Err = early.writeErr
					return j.DeliveryError
				}
			}
			if s.ctx.Err() != nil {
				return retryableError(errSenderClosed, "mllp %s: queue id %d (control id %q) interrupted", s.name, m.QueueID, want)
			}
			if ctx.Err() != nil && unended {
				// The receiver answered, but broke the framing: waiting
				// longer cannot help, and each retry is a duplicate.
				return retryableError(err, "mllp %s: the ACK for control id %q (queue id %d) did not end: its end block (0x1C) was not followed by CR (0x0D); connection closed, and the message will be sent again (the receiver must end each frame with 0x1C 0x0D)", s.name, want, m.QueueID)
			}
			if ctx.Err() != nil {
				return retryableError(err, "mllp %s: no ACK for control id %q (queue id %d) in time; connection closed", s.name, want, m.QueueID)
			}
			return retryableError(err, "mllp %s: exchange for control id %q (queue id %d) failed; connection closed", s.name, want, m.QueueID)
		}
		derr := s.judge(reply, want, m.QueueID)
		if derr != nil && derr.closeConn {
			c.close()
			c = nil
		}
		if derr == nil {
			return nil
		}
		return derr.DeliveryError
	}
}

// judgement is a DeliveryError that may also condemn the connection.
type judgement struct {
	*DeliveryError
	closeConn bool
}

// judge reads the receiver's reply to the message with control ID want.
func (s *mllpSender) judge(reply []byte, want string, queueID int64) *judgement {
	ack, err := hl7.ParseAck(reply)
	if err != nil {
		return &judgement{retryableError(err, "mllp %s: unreadable reply to control id %q (queue id %d); connection closed", s.name, want, queueID), true}
	}
	detail := ack.ErrorMessage
	if detail == "" {
		detail = ack.Text
	}
	if ack.ErrorCode != "" {
		detail = strings.TrimSpace("error " + ack.ErrorCode + " " + detail)
	}
	detail = truncate(detail, mllpReasonMax)
	if ack.ControlID == "" && want != "" && ack.Code.Outcome() == hl7.Reject {
		// A receiver that could not read the message (too large, not
		// framed as it expects) cannot echo its control ID. It answered
		// what was just written on a connection that carries one message
		// at a time: this message's rejection, which sending it again
		// only repeats. Its state after such a message is unknown.
		de := permanentError(nil, "mllp %s: receiver rejected control id %q (queue id %d) with %s, without naming its control id (MSA-2 empty): it could not read the message; connection closed", s.name, want, queueID, ack.Code)
		de.Detail = detail
		return &judgement{de, true}
	}
	if !acknowledges(ack.ControlID, want) {
		// The ACK's MSA-2 is the receiver's text: detail, kept out of logs.
		de := retryableError(nil, "mllp %s: ACK for another control id while waiting for %q (queue id %d): connection out of step, closed", s.name, want, queueID)
		de.Detail = fmt.Sprintf("the ACK's control id: %q", truncate(ack.ControlID, mllpReasonMax))
		return &judgement{de, true}
	}
	var de *DeliveryError
	switch ack.Code.Outcome() {
	case hl7.Accept:
		return nil
	case hl7.Reject:
		de = permanentError(nil, "mllp %s: receiver rejected control id %q (queue id %d) with %s", s.name, want, queueID, ack.Code)
	default:
		de = retryableError(nil, "mllp %s: receiver answered %s to control id %q (queue id %d)", s.name, ack.Code, want, queueID)
	}
	de.Detail = detail
	return &judgement{de, false}
}

// controlIDWidth is the length HL7 v2.3 to v2.5 give MSH-10 and MSA-2.
const controlIDWidth = 20

// acknowledges reports whether an ACK's MSA-2, got, names the message whose
// control id is want: the same text, or, for a control id longer than
// controlIDWidth, its first controlIDWidth characters, which is how a
// receiver of those versions may echo it. Taken for another message's ACK,
// such a message was sent again forever. A connection carries one message
// at a time, and one closed on a timeout is not used again, so the prefix
// cannot be an older message's.
func acknowledges(got, want string) bool {
	return got == want || (len(want) > controlIDWidth && len(got) == controlIDWidth && strings.HasPrefix(want, got))
}

// connect dials the receiver, unless a recent dial failed and the backoff
// has not elapsed: then it fails at once, saying when the next dial is
// allowed.
func (s *mllpSender) connect(ctx context.Context) (net.Conn, *DeliveryError) {
	if next, last, ok := s.backoff.allow(); !ok {
		// Another lane's dial failed just now: this send dials nothing and
		// writes nothing, so it is no attempt (counted, the lanes of an
		// unreachable receiver used up max_attempts on dials never made),
		// and the lane waits for the next dial rather than poll.
		de := retryableError(fmt.Errorf("%w: %w", errNotWritten, last), "mllp %s: %s unreachable; next dial allowed at %s (in %s); not sent",
			s.name, s.addr, next.Format("15:04:05.000"), time.Until(next).Round(time.Millisecond))
		de.RetryAfter = time.Until(next)
		return nil, de
	}
	if err := ctx.Err(); err != nil {
		return nil, retryableError(context.Cause(ctx), "mllp %s: no time left to dial %s", s.name, s.addr)
	}
	nc, err := s.dial(ctx)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			// Our own cancellation (Close, lane stopping) says nothing
			// about the receiver.
			return nil, retryableError(err, "mllp %s: dial %s cancelled", s.name, s.addr)
		}
		wait := s.backoff.failed(err)
		return nil, retryableError(err, "mllp %s: dial %s failed; next dial in %s", s.name, s.addr, wait.Round(time.Millisecond))
	}
	s.backoff.succeeded()
	return nc, nil
}

// Close implements Sender: it aborts any Send in progress, waits for the
// slots to come back, and closes every connection.
func (s *mllpSender) Close() error {
	s.once.Do(func() {
		s.cancel()
		for range cap(s.slots) {
			if c := <-s.slots; c != nil {
				c.close()
			}
		}
	})
	return nil
}

// mllpConn is one connection to the receiver and its reader goroutine.
type mllpConn struct {
	nc      net.Conn
	fr      *hl7.FrameReader // the reader's own until done is closed
	replies chan mllpReply   // the reader's frames and its final error
	closing chan struct{}    // closed by close: the reader stops
	done    chan struct{}    // closed when the reader has stopped
	once    sync.Once
}

type mllpReply struct {
	payload []byte
	err     error
}

func newMLLPConn(nc net.Conn) *mllpConn {
	c := &mllpConn{nc: nc, fr: hl7.NewFrameReader(nc, mllpMaxAckBytes), replies: make(chan mllpReply, 1), closing: make(chan struct{}), done: make(chan struct{})}
	go c.read()
	return c
}

// read hands each frame read to the Send in progress, until an error.
func (c *mllpConn) read() {
	defer close(c.done)
	for {
		p, err := c.fr.ReadFrame()
		select {
		case c.replies <- mllpReply{p, err}:
		case <-c.closing:
			return
		}
		if err != nil {
			return
		}
	}
}

// exchange writes frame and waits for the reply frame, within ctx.
func (c *mllpConn) exchange(ctx context.Context, frame []byte) ([]byte, error) {
	select {
	case r := <-c.replies:
		// The receiver spoke while the connection was idle: it closed the
		// connection, or sent something unasked for. Either way it cannot
		// carry this message.
		if r.err != nil {
			return nil, fmt.Errorf("%w: %w", errIdleConnDead, r.err)
		}
		return nil, fmt.Errorf("%w: it sent an unsolicited frame", errIdleConnDead)
	default:
	}
	deadline, _ := ctx.Deadline()
	if err := c.nc.SetWriteDeadline(deadline); err != nil {
		return nil, err
	}
	// A cancelled ctx (rather than an expired one) interrupts the write too.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.nc.Write(frame); err != nil {
		werr := fmt.Errorf("writing the message: %w", err)
		// A receiver may answer before it has read the whole message (a
		// refusal of one too large for it) and close: its answer came
		// before the reset, and says more than the broken write. The
		// connection is broken: the reader's next hand-over is prompt.
		if ctx.Err() == nil {
			select {
			case r := <-c.replies:
				if r.err == nil {
					return nil, &earlyReply{payload: r.payload, writeErr: werr}
				}
			case <-ctx.Done():
			}
		}
		return nil, werr
	}
	select {
	case r := <-c.replies:
		if r.err != nil {
			return nil, fmt.Errorf("reading the ACK: %w", r.err)
		}
		return r.payload, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the ACK: %w", context.Cause(ctx))
	}
}

// earlyReply is exchange's error when the write failed after the receiver
// had answered: the answer may say why.
type earlyReply struct {
	payload  []byte
	writeErr error
}

func (e *earlyReply) Error() string { return e.writeErr.Error() }
func (e *earlyReply) Unwrap() error { return e.writeErr }

// close closes the connection and waits for its reader to stop.
func (c *mllpConn) close() {
	c.once.Do(func() {
		close(c.closing)
		_ = c.nc.Close()
		<-c.done
	})
}

// dialBackoff spaces out dials to an unreachable receiver: after a failed
// dial, the next is allowed only after an exponential backoff from base to
// max, with jitter (each wait is drawn from [d/2, d]); a successful dial
// resets it.
type dialBackoff struct {
	base, max time.Duration
	now       func() time.Time
	jitter    func(d time.Duration) time.Duration

	mu       sync.Mutex
	failures int
	next     time.Time // no dial before this
	lastErr  error
}

func newDialBackoff(base, ceiling time.Duration) *dialBackoff {
	if base <= 0 {
		base = defaultRetryBase
	}
	if ceiling < base {
		ceiling = max(defaultRetryMax, base)
	}
	return &dialBackoff{
		base: base, max: ceiling, now: time.Now,
		jitter: func(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) },
	}
}

// allow reports whether a dial may go ahead; if not, when the next may and
// what the last dial's error was.
func (b *dialBackoff) allow() (next time.Time, lastErr error, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures == 0 || !b.now().Before(b.next) {
		return time.Time{}, nil, true
	}
	return b.next, b.lastErr, false
}

// failed records a failed dial and returns the wait before the next.
func (b *dialBackoff) failed(err error) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	d := b.base
	for i := 1; i < b.failures && d < b.max; i++ {
		d = doubled(d) // d < max, but 2d may pass the longest Duration
	}
	d = b.jitter(min(d, b.max))
	b.next, b.lastErr = b.now().Add(d), err
	return d
}

// succeeded records a successful dial: the next failure starts from base.
func (b *dialBackoff) succeeded() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures, b.next, b.lastErr = 0, time.Time{}, nil
}

// truncate cuts s to at most max bytes, at a character boundary, marking
// the cut with "...".
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

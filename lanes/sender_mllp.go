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

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/internal/textcut"
	"github.com/messagefoundry/mf/internal/tlsfiles"
)

// mllpMaxAckBytes bounds a receiver's reply; an ACK is a few hundred bytes.
const mllpMaxAckBytes = 1 << 20

// mllpReasonMax bounds the receiver's text quoted in a DeliveryError.
const mllpReasonMax = 200

// mllpMaxUnawaited bounds the messages a connection remembers having
// carried without waiting for their ACK (see unawaitedSends).
const mllpMaxUnawaited = 1024

// A message sent without waiting for its ACK (MSH-15 NE, ER) is first
// written on a new connection only once the connection has stood for
// mllpSettle: twice what the dial took, within these bounds (see Send).
const (
	mllpSettleMin = 25 * time.Millisecond
	mllpSettleMax = time.Second
)

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
//
// A message whose MSH-15 (accept acknowledgment type) is NE or ER asks its
// receiver, in HL7's enhanced mode, for no ACK when it accepts it: such a
// receiver (mf's own listener) answers nothing, and a sender waiting for
// the ACK timed out and sent it again, forever, the lane blocked behind it.
// So such a message is delivered once it is written whole, and its
// connection remembers it (unawaitedSends): an answer to it that comes
// after all, from a receiver that ACKs anyway or refuses it (ER), is taken
// off the connection instead of being read as the next message's ACK; a
// refusal is logged at WARN and counted (mf_deliveries_refused_after_total),
// since the message was counted delivered and nothing sends it again.
type mllpSender struct {
	name, addr string
	timeout    time.Duration
	dial       func(ctx context.Context) (net.Conn, error)
	backoff    *dialBackoff
	// log tells of answers to messages sent without waiting for them
	// (strayAck); the lanes' manager sets it, else they are not logged.
	log zerolog.Logger
	// warnUnawaitable says once that messages asking for no ACK are
	// waited for all the same, on a destination of several connections.
	warnUnawaitable sync.Once
	// cert is the client certificate (tls_cert, tls_key) as on disk, or
	// nil: its renewals are logged with log.
	cert *tlsfiles.Pair

	slots  chan *mllpConn
	ctx    context.Context // cancelled by Close: aborts every Send
	cancel context.CancelFunc
	once   sync.Once
}

func newMLLPSender(o config.Outbound) (*mllpSender, error) {
	if err := config.CheckHostPort(o.Address, false); err != nil {
		return nil, fmt.Errorf("address: %w", err)
	}
	nd := &net.Dialer{KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context) (net.Conn, error) { return nd.DialContext(ctx, "tcp", o.Address) }
	var cert *tlsfiles.Pair
	if o.TLS {
		cfg, pair, err := outboundTLS(o)
		if err != nil {
			return nil, err
		}
		cert = pair
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
		log:     zerolog.Nop(),
		cert:    cert,
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
// tls_cert/tls_key, each handshake taking it as the files are then (a
// renewal needs no reload), the server_name override. The server's
// certificate is verified against the roots and for the name dialled
// (server_name, else the address's or the URL's host, an IP address
// against the certificate's IP addresses): crypto/tls does both unless
// told not to, and nothing here tells it not to.
func OutboundTLSConfig(o config.Outbound) (*tls.Config, error) {
	cfg, _, err := outboundTLS(o)
	return cfg, err
}

// outboundTLS is OutboundTLSConfig, and the client certificate it presents
// (nil: none), to which the sender gives its logger (setLog).
func outboundTLS(o config.Outbound) (*tls.Config, *tlsfiles.Pair, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return nil, nil, fmt.Errorf("tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("tls_ca: %s holds no PEM certificate", o.TLSCA)
		}
		cfg.RootCAs = pool
	}
	if o.TLSCert == "" && o.TLSKey == "" {
		return cfg, nil, nil
	}
	if o.TLSCert == "" || o.TLSKey == "" {
		return nil, nil, errors.New("tls_cert and tls_key go together")
	}
	cert, err := tlsfiles.LoadPair(tlsfiles.Endpoint{Kind: "outbound", Name: o.Name}, o.TLSCert, o.TLSKey, zerolog.Nop())
	if err != nil {
		return nil, nil, fmt.Errorf("tls_cert/tls_key: %w", err)
	}
	cfg.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		c := cert.Certificate()
		// As crypto/tls does with Certificates: to a server that takes
		// none of this certificate's CAs or algorithms, send none (its
		// refusal then says it wants one, which tlsAdvice explains).
		if cri.SupportsCertificate(c) != nil {
			return new(tls.Certificate), nil
		}
		return c, nil
	}
	return cfg, cert, nil
}

// Send implements Sender: one message, one ACK, unless the message asks
// for none when accepted (MSH-15 NE, ER; see mllpSender).
func (s *mllpSender) Send(ctx context.Context, m Outgoing) error {
	frame, err := hl7.AppendFrame(nil, m.Payload)
	if err != nil {
		return permanentError(err, "mllp %s: queue id %d cannot be sent over MLLP", s.name, m.QueueID)
	}
	msg, perr := hl7.Parse(m.Payload)
	var sent *hl7.Message // read with its character set, as its ACK is
	if perr == nil {
		sent = msg
	}
	want := m.ControlID
	if want == "" || strings.ContainsRune(want, utf8.RuneError) {
		// None stored, or stored as valid UTF-8 (storage.ValidText): the
		// ACK echoes the bytes as sent.
		if perr == nil {
			want = msg.ControlID()
		}
	}
	// A receiver that honours MSH-15 answers an acceptance of this message
	// only if ShouldAck says so: not for NE or ER. One that does not parse
	// is waited for, as a receiver answers it (AR) whatever it says.
	//
	// Only on a destination of one connection: there the lane's next
	// message follows this one on the same connection, which the receiver
	// reads in order. With more, it would go on another, which the receiver
	// may read first: the lane's order would be lost. There such a message
	// is waited for as any other (and, from a receiver that honours MSH-15,
	// times out), and the sender says so once.
	var unawaited *unawaitedSend
	if perr == nil && !hl7.ShouldAck(msg, hl7.AcceptCode(msg, hl7.Accept)) {
		if cap(s.slots) == 1 {
			unawaited = &unawaitedSend{controlID: want, queueID: m.QueueID, ackType: msg.AcceptAckType()}
		} else {
			s.warnUnawaitable.Do(func() {
				s.log.Warn().Int("connections", cap(s.slots)).Str("accept_ack_type", msg.AcceptAckType()).Int64("queue_id", m.QueueID).
					Msg("a message asks for no ACK (MSH-15 NE or ER), but this destination has more than one connection: not waiting for its ACK could deliver its lane out of order, so it is waited for, and a receiver that honours MSH-15 sends none (the send times out and is retried); set connections = 1 for this destination")
			})
		}
	}

	ctx, cancel := withSendDeadline(ctx, s.timeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel) // Close aborts the Send
	defer stop()
	writeBy, budget := latestWrite(ctx, s.timeout) // see mllpSender
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
	// closed: the failure of a write on a reused connection that the
	// receiver closed (closedByReceiver), being sent again at once. The
	// message was written: if the new attempt writes nothing, that
	// failure is the outcome, counted as an attempt.
	var closed *DeliveryError
	for {
		fresh := c == nil
		if fresh {
			dialStart := time.Now()
			nc, derr := s.connect(ctx)
			if derr != nil {
				if closed != nil && errors.Is(derr, errNotWritten) {
					return closed
				}
				return derr
			}
			c = newMLLPConn(nc, s.strayAck)
			dialled = true
			if unawaited != nil {
				// Nothing will say whether the message arrived: a receiver
				// that closes a connection at once (at its connection
				// limit; TLS 1.3 refusing the client's certificate, which
				// the client learns after its handshake) would take it
				// unread, delivered. The connection must stand first.
				settle := min(max(2*time.Since(dialStart), mllpSettleMin), mllpSettleMax)
				if err := c.settle(ctx, min(settle, time.Until(writeBy))); err != nil {
					c.close()
					c = nil
					if s.ctx.Err() != nil {
						return retryableError(errSenderClosed, "mllp %s: queue id %d not sent", s.name, m.QueueID)
					}
					if ctx.Err() != nil {
						return retryableError(err, "mllp %s: queue id %d (control id %q) not sent: interrupted while its new connection settled", s.name, m.QueueID, want)
					}
					return s.refusedNew(closed, err, "mllp %s: %s closed the new connection within %s, before control id %q (queue id %d) was written; not sent (sent with MSH-15 %s, it is not acknowledged, so only a connection that stands can carry it)",
						s.name, s.addr, settle.Round(time.Millisecond), want, m.QueueID, unawaited.ackType)
				}
			}
		}
		if time.Now().After(writeBy) {
			// The wait, a slow dial or the settling ate the time; a new
			// connection is kept for the next Send.
			if closed != nil {
				return closed
			}
			return tooLate(dialled)
		}
		if unawaited == nil && c.unawaited.mayBeAnsweredAs(want) {
			// The connection carried a message sent without waiting whose
			// ACK could not be told from this one's (the same control id,
			// or the same first 20 characters): on a new connection, whose
			// next answer can only be this message's.
			c.close()
			c = nil
			continue
		}
		reply, err := c.exchange(ctx, frame, unawaited, m.mayWrite)
		if errors.Is(err, ErrDistrusted) {
			// Nothing written on this connection, which is kept. A reused
			// connection that closed after the frame was written (closed)
			// has carried it once: that is the attempt's outcome, an
			// attempt counted, not a send that never happened.
			if closed != nil {
				return closed
			}
			return distrusted("mllp", s.name, m)
		}
		if err != nil {
			c.close()
			unended := c.fr.AwaitingCR() // the reader has stopped: safe to ask
			carried := c.unawaited.carried()
			c = nil
			if errors.Is(err, errIdleConnDead) {
				if !fresh {
					continue // nothing was written: send on a new connection
				}
				return s.refusedNew(closed, err, "mllp %s: %s closed the new connection before control id %q (queue id %d) was written; not sent",
					s.name, s.addr, want, m.QueueID)
			}
			if fresh && !carried && tlsRefused(err) {
				// TLS 1.3: the client learns that the server refused its
				// certificate only at its first read, after the frame
				// went out; the server's TLS took no data of the session.
				return s.refusedNew(closed, err, "mllp %s: %s refused this node's TLS session on the new connection, so control id %q (queue id %d) reached no application; not sent",
					s.name, s.addr, want, m.QueueID)
			}
			var early *earlyReply
			if errors.As(err, &early) {
				// Not all of the message was written, so an acceptance
				// counts for nothing, nor does a reply out of step; a
				// refusal, or an error for this control ID, is the
				// receiver's word on it.
				if j := s.judge(early.payload, sent, want, m.QueueID, carried); j != nil && (j.Permanent || !j.closeConn) {
					j.Err = early.writeErr
					return j.DeliveryError
				}
			}
			if s.ctx.Err() != nil {
				return retryableError(errSenderClosed, "mllp %s: queue id %d (control id %q) interrupted", s.name, m.QueueID, want)
			}
			if !fresh && closed == nil && ctx.Err() == nil && closedByReceiver(err) {
				// A connection used before, closed by the receiver with no
				// answer: what one that takes a message per connection does
				// to a message that came before its close, and an idle
				// timeout to one crossing it. Once, at once, on a new
				// connection: a retry by the lane sent it again as well,
				// but after its backoff, and counted an attempt.
				closed = retryableError(err, "mllp %s: %s closed the connection without answering control id %q (queue id %d), and it could not be sent again on a new one in time", s.name, s.addr, want, m.QueueID)
				continue
			}
			if ctx.Err() != nil && unended {
				// The receiver answered, but broke the framing: waiting
				// longer cannot help, and each retry is a duplicate.
				return retryableError(err, "mllp %s: the ACK for control id %q (queue id %d) did not end: its end block (0x1C) was not followed by CR (0x0D); connection closed, and the message will be sent again (the receiver must end each frame with 0x1C 0x0D)", s.name, want, m.QueueID)
			}
			if ctx.Err() != nil {
				return retryableError(err, "mllp %s: no ACK for control id %q (queue id %d) in time; connection closed", s.name, want, m.QueueID)
			}
			return withTLSAdvice(retryableError(err, "mllp %s: exchange for control id %q (queue id %d) failed; connection closed", s.name, want, m.QueueID))
		}
		if unawaited != nil {
			return nil // written whole: delivered (see mllpSender)
		}
		derr := s.judge(reply, sent, want, m.QueueID, c.unawaited.carried())
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

// judge reads the receiver's reply to the message with control ID want;
// carried says whether its connection carried messages sent without
// waiting for their ACK (see unawaitedSends).
func (s *mllpSender) judge(reply []byte, sent *hl7.Message, want string, queueID int64, carried bool) *judgement {
	ack, err := hl7.ParseAckTo(reply, sent)
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
	// A control ID of only blanks names no message, and a receiver (mf's
	// listener) may answer it with an empty MSA-2: as for an empty one, that
	// is an ordinary answer, not one to a message it could not read.
	named := strings.TrimSpace(want) != ""
	if ack.ControlID == "" && named && ack.Code.Outcome() == hl7.Reject && carried {
		// It may answer a message sent before without waiting, which the
		// receiver read only now: this one goes again on a new connection,
		// where nothing comes before it.
		s.strayAck(unawaitedSend{}, ack) // it may refuse one of them: said and counted
		de := retryableError(nil, "mllp %s: a rejection (%s) without a control id (MSA-2 empty) while waiting for control id %q (queue id %d), on a connection that also carried messages sent with MSH-15 NE or ER without waiting for their ACK: it may be theirs; connection closed, the message is sent again on a new one", s.name, ack.Code, want, queueID)
		de.Detail = detail
		return &judgement{de, true}
	}
	if ack.ControlID == "" && named && ack.Code.Outcome() == hl7.Reject {
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
// cannot be an older message's: but for one sent without waiting for its
// ACK (MSH-15 NE, ER), and a message that such an older one's ACK could
// answer is sent on a new connection (see Send). A control id of only
// blanks is answered by an MSA-2 of blanks or an empty one (hl7.Ack's).
func acknowledges(got, want string) bool {
	return got == want || (len(want) > controlIDWidth && len(got) == controlIDWidth && strings.HasPrefix(want, got)) ||
		(strings.TrimSpace(want) == "" && strings.TrimSpace(got) == "")
}

// strayAck handles an answer to a message sent without waiting for it
// (MSH-15 NE, ER; see mllpSender), read from its connection: an acceptance
// is dropped; an error or a rejection came after the message was counted
// delivered, and nothing will send it again, so it is logged and counted.
// The ACK's text stays out of the log: it may quote the message.
func (s *mllpSender) strayAck(sent unawaitedSend, ack hl7.Acknowledgment) {
	if ack.Code.Outcome() == hl7.Accept {
		s.log.Debug().Int64("queue_id", sent.queueID).Str("control_id", sent.controlID).Str("ack_code", string(ack.Code)).
			Msg("an ACK of a message sent with MSH-15 NE or ER, not waited for: dropped")
		return
	}
	countRefusedAfter(s.name)
	if sent.controlID == "" {
		// Unnamed (MSA-2 empty): a receiver that could not read a message.
		s.log.Warn().Str("ack_code", string(ack.Code)).
			Msg("the destination refused a message it could not name (MSA-2 empty) on a connection that carried messages sent with MSH-15 NE or ER, counted delivered without waiting for their ACK: it may be one of them, and it will not be sent again; the receiver's logs say which")
		return
	}
	s.log.Warn().Int64("queue_id", sent.queueID).Str("control_id", sent.controlID).Str("accept_ack_type", sent.ackType).Str("ack_code", string(ack.Code)).
		Msg("the destination refused a message already counted delivered: it was sent with MSH-15 NE or ER, so its ACK was not waited for, and it will not be sent again; the receiver's logs say why")
}

// tlsCert is the sender's client certificate as on disk, or nil.
func (s *mllpSender) tlsCert() *tlsfiles.Pair { return s.cert }

// setLog gives the sender, and its client certificate, the logger of its
// destination (see strayAck).
func (s *mllpSender) setLog(log zerolog.Logger) {
	s.log = log
	if s.cert != nil {
		s.cert.SetLog(log)
	}
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
		// Nothing of the message was written: no attempt either (counted,
		// a receiver down for a few dials used up max_attempts and set
		// each head aside, or held it, in turn). The lane waits for the
		// next dial, which backs off up to retry_max_seconds.
		return nil, s.backoff.notWritten(err, "mllp %s: dial %s failed; next dial in %s", s.name, s.addr)
	}
	s.backoff.succeeded()
	return nc, nil
}

// refusedNew is the outcome of a send on a new connection that the
// receiver would not take (it closed it at once, or its TLS refused this
// node): nothing of the message reached it, so no attempt is counted
// (errNotWritten), and the next connection waits for the dial backoff, as
// after a failed dial (counted, a receiver at its connection limit, or
// refusing this node's certificate, used up max_attempts and set
// messages aside that no receiver had seen). If the message was written
// once before, on a reused connection the receiver closed (closed), that
// is the attempt's outcome.
func (s *mllpSender) refusedNew(closed *DeliveryError, err error, format string, args ...any) *DeliveryError {
	if closed != nil {
		return closed
	}
	return s.backoff.notWritten(err, format+"; next connection in %s", args...)
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

	// unawaited are the messages the connection carried without waiting
	// for their ACK; an answer to one of them goes to onStray, not to the
	// Send in progress.
	unawaited unawaitedSends
	onStray   func(unawaitedSend, hl7.Acknowledgment)
}

type mllpReply struct {
	payload []byte
	err     error
}

func newMLLPConn(nc net.Conn, onStray func(unawaitedSend, hl7.Acknowledgment)) *mllpConn {
	c := &mllpConn{nc: nc, fr: hl7.NewFrameReader(nc, mllpMaxAckBytes), replies: make(chan mllpReply, 1), closing: make(chan struct{}), done: make(chan struct{}), onStray: onStray}
	go c.read()
	return c
}

// read hands each frame read to the Send in progress, until an error; an
// answer to a message sent without waiting for it goes to onStray at once,
// even while the connection is idle.
func (c *mllpConn) read() {
	defer close(c.done)
	for {
		p, err := c.fr.ReadFrame()
		if err == nil && c.stray(p) {
			continue
		}
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

// stray reports whether payload answers one of the messages the
// connection carried without waiting for their ACK, and if so hands it to
// onStray. The reader asks first; a Send asks again of the frames the
// reader handed on, as the reader may read an answer before the message's
// Send has added it to unawaited.
func (c *mllpConn) stray(payload []byte) bool {
	if c.unawaited.empty() {
		return false
	}
	ack, err := hl7.ParseAck(payload)
	if err != nil {
		return false
	}
	sent, ok := c.unawaited.take(ack.ControlID)
	if ok {
		c.onStray(sent, ack)
	}
	return ok
}

// next returns the reader's next frame (or its error) that is not an answer
// to a message sent without waiting for it; ok is false when ctx ended
// first.
func (c *mllpConn) next(ctx context.Context) (r mllpReply, ok bool) {
	for {
		select {
		case r := <-c.replies:
			if r.err == nil && c.stray(r.payload) {
				continue
			}
			return r, true
		case <-ctx.Done():
			return mllpReply{}, false
		}
	}
}

// settle waits d for a new connection to be closed by the receiver (or to
// deliver anything unasked for, as a closed one does): nil if it stood.
func (c *mllpConn) settle(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-c.replies:
		if r.err != nil {
			return r.err
		}
		return errors.New("it sent an unsolicited frame")
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// exchange writes frame and waits for the reply frame, within ctx; for a
// message sent without waiting for its ACK (unawaited not nil), it returns
// no reply once the frame is written, and adds the message to the
// connection's unawaited. mayWrite is asked right before the write: false
// writes nothing and returns ErrDistrusted.
func (c *mllpConn) exchange(ctx context.Context, frame []byte, unawaited *unawaitedSend, mayWrite func() bool) ([]byte, error) {
	for idle := true; idle; {
		select {
		case r := <-c.replies:
			if r.err == nil && c.stray(r.payload) {
				continue
			}
			// The receiver spoke while the connection was idle: it closed
			// the connection, or sent something unasked for. Either way it
			// cannot carry this message.
			if r.err != nil {
				return nil, fmt.Errorf("%w: %w", errIdleConnDead, r.err)
			}
			if c.unawaited.carried() {
				if ack, err := hl7.ParseAck(r.payload); err == nil && ack.ControlID == "" && ack.Code.Outcome() != hl7.Accept {
					// A receiver that cannot read a message (too large, not
					// framed as it expects) cannot name it: this may refuse
					// one sent without waiting.
					c.onStray(unawaitedSend{}, ack)
				}
			}
			return nil, fmt.Errorf("%w: it sent an unsolicited frame", errIdleConnDead)
		default:
			idle = false
		}
	}
	deadline, _ := ctx.Deadline()
	if err := c.nc.SetWriteDeadline(deadline); err != nil {
		return nil, err
	}
	if !mayWrite() {
		return nil, ErrDistrusted
	}
	// A cancelled ctx (rather than an expired one) interrupts the write too.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	if unawaited != nil {
		// Before the write, so that the reader knows an answer that comes
		// at once; taken for one only once written (see take).
		c.unawaited.add(*unawaited)
	}
	if _, err := c.nc.Write(frame); err != nil {
		werr := fmt.Errorf("writing the message: %w", err)
		// A receiver may answer before it has read the whole message (a
		// refusal of one too large for it) and close: its answer came
		// before the reset, and says more than the broken write. The
		// connection is broken: the reader's next hand-over is prompt.
		if ctx.Err() == nil {
			if r, ok := c.next(ctx); ok && r.err == nil {
				return nil, &earlyReply{payload: r.payload, writeErr: werr}
			}
		}
		return nil, werr
	}
	if unawaited != nil {
		// Written whole, and handed to the kernel (a TLS connection
		// buffers nothing of its own): nothing more to wait for.
		c.unawaited.written()
		return nil, nil
	}
	r, ok := c.next(ctx)
	if !ok {
		return nil, fmt.Errorf("waiting for the ACK: %w", context.Cause(ctx))
	}
	if r.err != nil {
		return nil, fmt.Errorf("reading the ACK: %w", r.err)
	}
	return r.payload, nil
}

// unawaitedSend is a message sent without waiting for its ACK.
type unawaitedSend struct {
	controlID string // as the receiver echoes it in MSA-2
	queueID   int64
	ackType   string // MSH-15: NE or ER
	// unwritten: its write is under way. An answer to it then is the
	// receiver's word on a message not delivered, which its Send judges
	// if the write fails (earlyReply).
	unwritten bool
}

// unawaitedSends are the messages a connection carried without waiting for
// their ACK (MSH-15 NE, ER), oldest first, the newest mllpMaxUnawaited of
// them: a receiver that honours MSH-15 never answers most of them. A new
// connection starts with none. The Send holding the connection adds to
// them; its reader and that Send take answered ones off.
type unawaitedSends struct {
	mu    sync.Mutex
	order []unawaitedSend
	keys  map[string]int // ackKey of each control id in order: how many
}

// ackKey is the part of a control id an ACK that answers it must echo
// (see acknowledges): two control ids one ACK could answer have the same.
func ackKey(controlID string) string {
	if strings.TrimSpace(controlID) == "" {
		return "" // blanks: any MSA-2 of blanks, or an empty one
	}
	if len(controlID) > controlIDWidth {
		return controlID[:controlIDWidth]
	}
	return controlID
}

func (u *unawaitedSends) add(s unawaitedSend) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.keys == nil {
		u.keys = map[string]int{}
	}
	if len(u.order) == mllpMaxUnawaited {
		u.forget(0)
	}
	s.unwritten = true
	u.order = append(u.order, s)
	u.keys[ackKey(s.controlID)]++
}

// written marks the newest, the one added last, as written whole.
func (u *unawaitedSends) written() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if n := len(u.order); n > 0 {
		u.order[n-1].unwritten = false
	}
}

// forget removes order[i]; u.mu is held.
func (u *unawaitedSends) forget(i int) {
	k := ackKey(u.order[i].controlID)
	if u.keys[k]--; u.keys[k] == 0 {
		delete(u.keys, k)
	}
	if i == 0 {
		// append reallocates once the front has eaten the capacity.
		u.order[0] = unawaitedSend{}
		u.order = u.order[1:]
		return
	}
	copy(u.order[i:], u.order[i+1:])
	u.order[len(u.order)-1] = unawaitedSend{}
	u.order = u.order[:len(u.order)-1]
}

// take removes and returns the oldest message written whole that an ACK
// with MSA-2 msa2 answers, if there is one.
func (u *unawaitedSends) take(msa2 string) (unawaitedSend, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.keys[ackKey(msa2)] == 0 {
		return unawaitedSend{}, false
	}
	for i, s := range u.order {
		if !s.unwritten && acknowledges(msa2, s.controlID) {
			u.forget(i)
			return s, true
		}
	}
	return unawaitedSend{}, false
}

// mayBeAnsweredAs reports whether an ACK of a message with control id want
// could be taken for the answer to one of these.
func (u *unawaitedSends) mayBeAnsweredAs(want string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.keys[ackKey(want)] > 0
}

func (u *unawaitedSends) empty() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.order) == 0
}

// carried reports whether any of them was written whole (the one being
// written, if any, is the newest).
func (u *unawaitedSends) carried() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := len(u.order)
	if n > 0 && u.order[n-1].unwritten {
		n--
	}
	return n > 0
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

// notWritten records err as a failed connection and returns the send's
// outcome: nothing of the message reached the receiver, so no attempt
// (errNotWritten), and the lane waits for the next connection
// (RetryAfter). format's last verb takes that wait.
func (b *dialBackoff) notWritten(err error, format string, args ...any) *DeliveryError {
	wait := b.failed(err)
	de := withTLSAdvice(retryableError(fmt.Errorf("%w: %w", errNotWritten, err), format, append(args, wait.Round(time.Millisecond))...))
	de.RetryAfter = wait
	return de
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
	return textcut.Cut(s, max) + "..."
}

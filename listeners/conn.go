package listeners

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/internal/textcut"
	"github.com/messagefoundry/mf/storage"
)

// conn serves one MLLP connection: read a frame, have it stored, answer
// with the ACK of DESIGN §6, and again. A connection never affects
// another: its bad bytes end only itself.
type conn struct {
	l     *MLLP
	c     net.Conn
	reply chan Result
}

func (cn *conn) serve() {
	l := cn.l
	cn.reply = make(chan Result, 1)
	if tc, ok := cn.c.(*tls.Conn); ok {
		// Set the deadline, then check for a stop, as the frame loop below
		// does: a stop's interruption that came before this deadline was
		// undone by it, and the handshake waited for the stop's grace.
		tc.SetDeadline(time.Now().Add(l.cfg.ReadTimeout()))
		if l.stopping() {
			return
		}
		if err := tc.Handshake(); err != nil {
			if l.stopping() {
				// Cut by the stop (its interruption): no failure of the
				// sender's, to count or warn of.
				l.log.Debug().Err(err).Str("remote", cn.c.RemoteAddr().String()).Msg("TLS handshake cut by the listener's stop")
				return
			}
			if probed(err) {
				// A load balancer's TCP check (the MLLP VIP's, every
				// second) or a port scan: closed before a handshake.
				l.log.Debug().Err(err).Str("remote", cn.c.RemoteAddr().String()).Msg("connection closed during the TLS handshake")
				return
			}
			var revoked *clientRevoked
			if errors.As(err, &revoked) {
				countHandshakeFailed(l.cfg.Name, tlsClientRevoked)
				cn.refuseRevoked(revoked)
				return
			}
			var notListed *clientNotListed
			if errors.As(err, &notListed) {
				countHandshakeFailed(l.cfg.Name, tlsClientNotListed)
				cn.refuseUnlisted(notListed)
				return
			}
			countHandshakeFailed(l.cfg.Name, tlsFailed)
			msg := "TLS handshake failed; connection closed (check the sender's certificate)"
			if l.cert != nil {
				// A sender refuses an expired certificate of the
				// listener's, and its alert names no certificate.
				if why := config.CertOutOfDate(l.cert.Leaf(), time.Now()); why != "" {
					msg = "TLS handshake failed; connection closed: this listener's own certificate (tls_cert " + l.cfg.TLSCert + ") " + why + ", which senders refuse: renew it (tls_cert and tls_key; the next handshake takes the renewed files)"
				}
			}
			cn.fault("tls", nil).Err(err).Msg(msg)
			return
		}
		tc.SetDeadline(time.Time{})
		if l.crls != nil {
			// For closeRevoked: a CRL loaded later may revoke it.
			l.conns.verified(cn.c, tc.ConnectionState().VerifiedChains)
		}
	}
	frames := hl7.NewFrameReader(cn.c, l.cfg.MaxMessageBytes)
	for {
		// Between messages the sender may stay silent up to the idle
		// timeout; once a frame has begun it must complete within the read
		// timeout (a sender stalled mid-frame is cut off).
		//
		// Set the deadline, then check for a stop: stop() closes `closing`
		// before it interrupts reads, so either we see it here or its
		// interruption comes after this deadline and ends the read below.
		cn.c.SetReadDeadline(time.Now().Add(l.cfg.IdleTimeout()))
		if l.stopping() {
			return
		}
		err := frames.StartFrame()
		inFrame := err == nil
		if inFrame {
			if l.frameStarted != nil {
				l.frameStarted()
			}
			// As above: a stop's interruption that came since the check
			// above is undone by this deadline, and the frame would be read
			// on for up to read_timeout, past the stop's grace.
			cn.c.SetReadDeadline(time.Now().Add(l.cfg.ReadTimeout()))
			if l.stopping() {
				return
			}
			var payload []byte
			payload, err = frames.ReadFrame()
			if err == nil {
				countReceived(l.cfg.Name)
				if !cn.answer(payload) {
					return
				}
				continue
			}
		}
		switch {
		case errors.Is(err, hl7.ErrFrameTooLarge):
			countRejected(l.cfg.Name, reasonOversize)
			cn.fault("oversize", nil).Int("max_message_bytes", l.cfg.MaxMessageBytes).
				Msg("message larger than max_message_bytes: answered AR and closed the connection (raise max_message_bytes if it is legitimate)")
			cn.refuse(hl7.NakUnparsableCondition(hl7.ConditionOf(err), fmt.Sprintf("message larger than %d bytes", l.cfg.MaxMessageBytes)))
		case errors.Is(err, hl7.ErrNotFramed):
			countRejected(l.cfg.Name, reasonNotFramed)
			// The error says which rule broke (a stray byte, a start block
			// inside a frame, an end block without its CR) in byte values and
			// offsets only: the sender and the operator both need it.
			cn.fault("framing", err).Err(err).
				Msg("the stream broke MLLP framing (0x0B payload 0x1C 0x0D): answered AR and closed the connection")
			cn.refuse(hl7.NakUnparsableCondition(hl7.ConditionOf(err), err.Error()))
		case errors.Is(err, os.ErrDeadlineExceeded) && frames.AwaitingCR() && !l.stopping():
			// The whole payload came, then 0x1C and nothing: the sender
			// waits for an answer, and would resend the same frame forever.
			countRejected(l.cfg.Name, reasonNotFramed)
			cn.fault("no CR", nil).Dur("read_timeout", l.cfg.ReadTimeout()).
				Msg("MLLP end block (0x1C) not followed by CR (0x0D) within read_timeout: answered AR and closed the connection (the sender must end each frame with 0x1C 0x0D)")
			cn.write(hl7.NakUnparsable("MLLP frame not ended: end block (0x1C) not followed by CR (0x0D)"))
		case frames.EndedWithoutCR() && !l.stopping():
			// As above, but the sender closed its side after the 0x1C: it
			// may still read the answer.
			countRejected(l.cfg.Name, reasonNotFramed)
			cn.fault("no CR", nil).
				Msg("MLLP end block (0x1C) not followed by CR (0x0D) before the sender closed its side: answered AR and closed the connection (the sender must end each frame with 0x1C 0x0D)")
			cn.write(hl7.NakUnparsable("MLLP frame not ended: end block (0x1C) not followed by CR (0x0D)"))
		case errors.Is(err, io.ErrUnexpectedEOF) && inFrame && !l.stopping():
			// The sender closed its side in the middle of a frame: nothing
			// to answer, but the operator must learn why its messages
			// never arrive.
			countRejected(l.cfg.Name, reasonIncomplete)
			cn.fault("frame not ended", nil).
				Msg("an MLLP frame began but the sender closed its side before it ended (0x1C 0x0D): connection closed without an answer (a sender that stops mid-message, or a proxy that cut it)")
		case errors.Is(err, os.ErrDeadlineExceeded) && inFrame && !l.stopping():
			// Nothing to answer (the message is not all here), but the
			// operator must learn why this sender's messages never arrive.
			countRejected(l.cfg.Name, reasonIncomplete)
			cn.fault("frame not ended", nil).Dur("read_timeout", l.cfg.ReadTimeout()).
				Msg("an MLLP frame began but did not end (0x1C 0x0D) within read_timeout: connection closed without an answer (the sender will resend; a slow link or a large message needs a longer read_timeout_seconds)")
		case errors.Is(err, io.EOF), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, net.ErrClosed):
			// closed by the sender, idle or stalled past its deadline, or
			// the listener is stopping
		default:
			l.log.Debug().Err(err).Msg("connection ended")
		}
		return
	}
}

// fault returns the WARN event for a fault of this connection, with the
// sender's address, or nil, which zerolog discards, when the same fault
// from the same host was logged within faultRepeat (faults). err, when not
// nil, tells faults of a kind apart by what was broken: each framing rule
// is its own fault, but not the offset at which it broke.
func (cn *conn) fault(kind string, err error) *zerolog.Event {
	if err != nil {
		reason, _, _ := strings.Cut(err.Error(), ", at payload offset")
		kind += ": " + reason
	}
	log, unlogged := cn.l.faults.note(kind, cn.c.RemoteAddr(), time.Now())
	if !log {
		return nil
	}
	e := cn.l.log.Warn().Str("remote", cn.c.RemoteAddr().String())
	if unlogged > 0 {
		e = e.Int("unlogged", unlogged).Dur("unlogged_within", faultRepeat)
	}
	return e
}

// refuseUnlisted logs the refusal of a client whose certificate is not
// for a name of tls_client_names: at WARN once a minute for each address
// (a partner set up wrong reconnects every few seconds), at DEBUG between.
// The names are the certificate's, never anything of a message.
func (cn *conn) refuseUnlisted(e *clientNotListed) {
	ev := cn.fault("tls: client not listed", nil)
	if ev == nil {
		ev = cn.l.log.Debug().Str("remote", cn.c.RemoteAddr().String())
	}
	ev.Strs("client_names", e.names).Strs("tls_client_names", cn.l.cfg.TLSClientNames).
		Msg("TLS handshake refused: the client's certificate carries none of this inbound's tls_client_names (its DNS names, or its CN when it has none); connection closed. If this partner may send here, add one of its names to tls_client_names and run mf reload; if not, it must stop connecting")
}

// refuseRevoked logs the refusal of a client whose certificate a CRL of
// client_crl revokes, as refuseUnlisted does: at WARN once a minute for
// each address, at DEBUG between. It names the certificate (CN, serial,
// issuer), never anything of a message.
func (cn *conn) refuseRevoked(e *clientRevoked) {
	ev := cn.fault("tls: client revoked", nil)
	if ev == nil {
		ev = cn.l.log.Debug().Str("remote", cn.c.RemoteAddr().String())
	}
	r := e.r
	ev.Str("client_cn", r.Cert.Subject.CommonName).Str("client_serial", r.Cert.SerialNumber.String()).
		Str("client_issuer", r.Cert.Issuer.CommonName).Time("revoked_at", r.RevokedAt).Str("client_crl", r.CRL.Path).
		Msg("TLS handshake refused: the client's certificate is revoked (its CA's CRL in client_crl lists its serial); connection closed. If this partner should still send here, it needs a new certificate from its CA; if not (a device lost, a partner offboarded), it must stop connecting")
}

// probed reports whether a TLS handshake failed because the other end
// closed (io.EOF) or reset the connection, as a TCP check does, rather than
// on something it sent.
func probed(err error) bool {
	return errors.Is(err, io.EOF) || connReset(err)
}

// answer stores one message and writes its ACK, if its sender wants one;
// false ends the connection.
func (cn *conn) answer(payload []byte) bool {
	start := time.Now()
	ack, ok := cn.handle(payload)
	if !ok {
		return false
	}
	if ack == nil {
		return true // enhanced mode: the sender asked for no accept ACK with this outcome
	}
	if !cn.write(ack) {
		return false
	}
	observeAck(cn.l.cfg.Name, start)
	return true
}

// handle stores one message and returns its ACK, or a nil ACK when the
// sender asked for none (enhanced mode, MSH-15 NE, ER or SU: it does not
// read one, and an unread ACK would answer its next message or fill the
// connection's buffers); ok is false when the listener gave up waiting (the
// sender gets no ACK and will resend).
func (cn *conn) handle(payload []byte) (ack []byte, ok bool) {
	l := cn.l
	// A byte order mark before MSH (a Windows program's text) is no part
	// of the message, as in a file inbound's file: without this, AR.
	payload = bytes.TrimPrefix(payload, utf8BOM)
	if len(bytes.TrimSpace(payload)) == 0 {
		// No message to keep, and some senders send such a frame as a
		// keepalive every few seconds: a rejected row and a WARN each
		// filled the store and the log. The NAK still answers it.
		countRejected(l.cfg.Name, reasonParse)
		cn.fault("empty frame", nil).Int("bytes", len(payload)).
			Msg("empty MLLP frame (no message in it): answered AR, nothing stored (logged once a minute per sender; a keepalive needs no frame: the connection's TCP keepalive holds it)")
		return hl7.NakUnparsable("empty MLLP frame: no message in it"), true
	}
	msg, perr := hl7.Parse(payload)
	if errors.Is(perr, hl7.ErrSecondMSH) {
		// Two messages glued in one frame: the first one's header is whole,
		// and its sender reads the answer by it (its mode, MSH-15, version,
		// character set), as for any message refused whole. Answered as bytes
		// without a header, an AR went even to a sender of NE, which never
		// reads it and took it for the answer to its next message.
		if h, err := hl7.ParseHeader(payload); err == nil {
			return cn.refuseMessage(payload, h, refusal{err: perr, cond: hl7.ConditionOf(perr), reason: reasonParse})
		}
	}
	if perr != nil {
		// With bad encoding characters the control ID may still be read
		// (by MSH-1 alone): the answer echoes it, and the operator can
		// find the message by it.
		controlID := hl7.UnparsableControlID(payload)
		// Kept as received, for the operator; the sender is told why.
		res, ok := cn.store(storage.NewMessage{Inbound: l.cfg.Name, ControlID: controlID, Payload: payload,
			Status: storage.MessageRejected, Error: perr.Error()})
		if !ok {
			return nil, false
		}
		if res.Err != nil && !errors.Is(res.Err, storage.ErrRefused) {
			// Nothing was kept: an AR would tell the sender to give up on
			// bytes the engine does not have (DESIGN §6: store failed, AE).
			// Counted as the store's failure: the sender sends it again,
			// and it is counted as not HL7 once it is kept. A refusal by
			// the store is no such failure: the ingest kept the bytes as
			// rejected if it could, and logged it; sent again, the message
			// would be refused again, so it is answered AR, as not HL7.
			countRejected(l.cfg.Name, reasonStore)
			l.env.logPayload(l.log.Warn().Str("reason", perr.Error()).Str("control_id", controlID).AnErr("store_error", res.Err), payload).
				Msg("message is not HL7 v2 and could not be kept: answered AE, the sender will resend it")
			return hl7.AckUnparsable(payload, hl7.AE, hl7.CondInternalError, "message not stored, send it again: "+storeReason(res.Err)), true
		}
		countRejected(l.cfg.Name, reasonParse)
		kept := keptAs(res.MessageID)
		l.env.logPayload(l.log.Warn().Str("reason", perr.Error()).Str("control_id", controlID), payload).Int64("message_id", res.MessageID).
			Msg("message is not HL7 v2: answered AR, " + kept)
		return hl7.AckUnparsable(payload, hl7.AR, hl7.ConditionOf(perr), perr.Error()), true
	}

	if r := refusalOf(l.cfg, msg); r.err != nil {
		return cn.refuseMessage(payload, msg, r)
	}

	deliveries := l.env.Router.Route(l.cfg.Name, msg)
	status := storage.MessageRouted
	if len(deliveries) == 0 {
		status = storage.MessageUnrouted
	}
	res, ok := cn.store(storage.NewMessage{
		Inbound: l.cfg.Name, ControlID: msg.ControlID(), MessageType: msg.MessageType(),
		Payload: payload, Status: status, Deliveries: deliveries,
	})
	if !ok {
		return nil, false
	}
	outcome, reason := hl7.Accept, ""
	switch {
	case errors.Is(res.Err, storage.ErrRefused):
		// Sent again unchanged it would be refused again: AR, not AE. The
		// ingest has logged it and kept its bytes as a rejected message.
		countRejected(l.cfg.Name, reasonRefused)
		outcome, reason = hl7.Reject, "message refused: the message store cannot hold one of its fields"
	case res.Err != nil:
		countRejected(l.cfg.Name, reasonStore)
		outcome, reason = hl7.Error, "message not stored, send it again: "+storeReason(res.Err)
	case status == storage.MessageUnrouted:
		countUnrouted(l.cfg.Name)
		l.log.Debug().Int64("message_id", res.MessageID).Str("control_id", msg.ControlID()).
			Msg("no route matches the message: stored as unrouted")
	}
	code := hl7.AcceptCode(msg, outcome)
	if !hl7.ShouldAck(msg, code) {
		switch {
		case errors.Is(res.Err, storage.ErrRefused):
			// Kept as rejected (the ingest logged it, with its id); sent
			// again, it would be refused again: no resend to ask for.
			l.log.Error().Err(res.Err).Str("control_id", msg.ControlID()).Str("accept_ack_type", msg.AcceptAckType()).
				Msg("message refused by the store (its bytes are kept as a rejected message), and its sender asked for no error ACK (MSH-15), so it does not know: " +
					"tell the sender's operator, and ask the sender to use MSH-15 AL or ER")
		case res.Err != nil:
			// The sender asked for no ACK of this outcome (MSH-15 NE or SU):
			// it will not send the message again, so this line is all that
			// is left of it.
			l.log.Error().Err(res.Err).Str("control_id", msg.ControlID()).Str("accept_ack_type", msg.AcceptAckType()).
				Msg("message not stored, and its sender asked for no error ACK (MSH-15), so it will not resend it: " +
					"ask the sender to resend it, and to use MSH-15 AL or ER")
		}
		return nil, true
	}
	return hl7.Ack(msg, code, reason), true
}

// refuseMessage keeps msg, which the inbound refuses (r: no control ID, a
// processing ID it does not take, a second message in its frame: msg is
// then the first one's header), as rejected, unrouted, and answers AR
// (CR in enhanced mode) with r's condition: sent again it would be refused
// again. If it cannot be kept, AE (CE), as for any message: the sender
// sends it again.
func (cn *conn) refuseMessage(payload []byte, msg *hl7.Message, r refusal) ([]byte, bool) {
	l := cn.l
	res, ok := cn.store(storage.NewMessage{Inbound: l.cfg.Name, ControlID: msg.ControlID(), MessageType: msg.MessageType(),
		Payload: payload, Status: storage.MessageRejected, Error: r.err.Error()})
	if !ok {
		return nil, false
	}
	outcome, cond, reason := hl7.Reject, r.cond, r.err.Error()
	// A refusal by the store is no failure to keep it: the ingest kept the
	// bytes as rejected if it could (and logged it); sent again, the
	// message would be refused again. AR, as for any refused message.
	notKept := res.Err != nil && !errors.Is(res.Err, storage.ErrRefused)
	if notKept {
		outcome, cond, reason = hl7.Error, hl7.CondInternalError, "message not stored, send it again: "+storeReason(res.Err)
	}
	code := hl7.AcceptCode(msg, outcome)
	acked := hl7.ShouldAck(msg, code)
	if notKept {
		countRejected(l.cfg.Name, reasonStore)
		if !acked {
			// MSH-15 NE or SU: the sender will not send it again, so this
			// line is all that is left of it.
			l.log.Error().Err(res.Err).Str("control_id", msg.ControlID()).Str("accept_ack_type", msg.AcceptAckType()).
				Msg("message not stored, and its sender asked for no error ACK (MSH-15), so it will not resend it: " +
					"ask the sender to resend it, and to use MSH-15 AL or ER")
		}
	} else {
		countRejected(l.cfg.Name, r.reason)
		// What the sender was told: nothing, if it asked for no error ACK.
		answered := "answered AR"
		if !acked {
			answered = "not answered, as its sender asked for no error ACK (MSH-15), so it does not know (tell the sender's operator, and ask for MSH-15 AL or ER)"
		}
		kept := keptAs(res.MessageID)
		ev := l.log.Warn()
		if !acked {
			ev = l.log.Error()
		}
		switch r.reason {
		case reasonParse:
			l.env.logPayload(ev.Str("reason", r.err.Error()).Str("control_id", msg.ControlID()).Int64("message_id", res.MessageID), payload).
				Msg("message refused: a second message (MSH) in its MLLP frame: " + answered + " and " + kept + ", not delivered (the sender must send each message in a frame of its own: tell its team)")
		case reasonNoControlID:
			ev.Str("reason", r.err.Error()).Str("message_type", textcut.Cut(msg.MessageType(), 40)).Int64("message_id", res.MessageID).
				Msg("message refused: no control ID (MSH-10): " + answered + " and " + kept + ", not delivered (the sending system must give each message a unique MSH-10: tell its team)")
		default:
			ev.Str("control_id", msg.ControlID()).Str("processing_id", textcut.Cut(msg.ProcessingID(), 20)).Int64("message_id", res.MessageID).
				Msg("message refused: its processing ID (MSH-11) is not this inbound's processing_id: " + answered + " and " + kept + ", not delivered (a test or training system sending to this one? point it at its own engine, or change processing_id)")
		}
	}
	if !acked {
		return nil, true
	}
	return hl7.AckCondition(msg, code, cond, reason), true
}

// store hands the message to the ingest actor and waits for its commit.
func (cn *conn) store(m storage.NewMessage) (Result, bool) {
	l := cn.l
	l.env.System.Root.Send(l.env.Ingest, Submit{Msg: m, Reply: cn.reply})
	return l.env.await(cn.reply, l.killed)
}

func (cn *conn) write(ack []byte) bool {
	cn.c.SetWriteDeadline(time.Now().Add(cn.l.cfg.ReadTimeout()))
	if err := hl7.WriteFrame(cn.c, ack); err != nil {
		cn.l.log.Debug().Err(err).Msg("writing the ACK failed; the sender will resend")
		return false
	}
	return true
}

// refuse answers a stream the connection cannot go on with (a frame too
// large, bytes that are not MLLP) before it is closed, and lingers: it
// half-closes, so that the sender reads the NAK and then the end of the
// stream, and drops whatever the sender still sends until it closes, for at
// most the read timeout. A socket closed with bytes unread is reset, not
// closed, and a sender still writing its frame would see "connection reset
// by peer", never the NAK that says why.
func (cn *conn) refuse(nak []byte) {
	if !cn.write(nak) {
		return
	}
	if hc, ok := cn.c.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
	}
	// As in serve: the deadline first, then the stop check.
	cn.c.SetReadDeadline(time.Now().Add(cn.l.cfg.ReadTimeout()))
	if cn.l.stopping() {
		return
	}
	io.Copy(io.Discard, cn.c)
}

// storeReason is the short, payload-free reason given to a sender in an AE.
func storeReason(err error) string {
	switch {
	case errors.Is(err, storage.ErrFenced), errors.Is(err, ErrShuttingDown):
		return "this node is no longer the primary"
	default:
		return "the message store is unavailable"
	}
}

// keptAs says in a log line what became of a refused message's bytes: kept
// as a rejected message (id), or not kept, when the store refused that copy
// too (the ingest logged it at ERROR).
func keptAs(id int64) string {
	if id == 0 {
		return "not kept (the store refused it)"
	}
	return "kept as rejected"
}

package lanes

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
)

// secret is in every test payload: no error may ever quote it.
const secret = "DOE^JANE^SECRET"

// testMessage returns an ADT^A01 with control ID id.
func testMessage(id string) Outgoing {
	payload := "MSH|^~\\&|MF|HOSP|LAB|LABFAC|20240115083015||ADT^A01^ADT_A01|" + id + "|P|2.5.1\r" +
		"PID|1||123456^^^HOSP^MR||" + secret + "||19800101|F\r"
	return Outgoing{QueueID: 42, ControlID: id, Payload: []byte(payload)}
}

// testMessageAsking returns testMessage(id) with MSH-15 (accept
// acknowledgment type) ackType; with a field separator other than '|' when
// sep is not 0, and '$' for components.
func testMessageAsking(id, ackType string, sep byte) Outgoing {
	m := testMessage(id)
	msh, rest, _ := strings.Cut(string(m.Payload), "\r")
	msh += "|||" + ackType // MSH-13, MSH-14 empty
	if sep != 0 {
		msh = strings.NewReplacer("|", string(sep), "^", "$").Replace(msh)
		rest = strings.NewReplacer("|", string(sep), "^", "$").Replace(rest)
	}
	m.Payload = []byte(msh + "\r" + rest)
	return m
}

// checkNoPayload fails the test if err quotes the payload.
func checkNoPayload(t *testing.T, err error) {
	t.Helper()
	if err != nil && (strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "123456")) {
		t.Errorf("error quotes the payload: %v", err)
	}
}

// wantDeliveryError asserts err is a *DeliveryError with that permanence
// whose text says says.
func wantDeliveryError(t *testing.T, err error, permanent bool, says string) *DeliveryError {
	t.Helper()
	var de *DeliveryError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DeliveryError", err, err)
	}
	if de.Permanent != permanent {
		t.Fatalf("Permanent = %v, want %v: %v", de.Permanent, permanent, err)
	}
	if IsPermanent(err) != permanent {
		t.Fatalf("IsPermanent disagrees with Permanent")
	}
	if !strings.Contains(err.Error(), says) {
		t.Fatalf("error %q does not say %q", err, says)
	}
	checkNoPayload(t, err)
	return de
}

// waitFor polls cond until it holds, failing the test after 5 s. For state
// that offers nothing to block on.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// answer is what the test receiver does with one message.
type answer struct {
	code      hl7.AckCode // ACK with this code (default AA)
	reason    string      // ... and this reason (an ERR segment)
	controlID *string     // ... answering this control ID instead of MSH-10
	raw       string      // reply with this frame payload instead of an ACK
	drop      bool        // close the connection without answering
	stall     bool        // never answer (but keep reading)
	noCR      bool        // end the ACK's frame with 0x1C alone, no CR
	delay     time.Duration
	// enhanced answers as mf's listener does: in m's acknowledgment mode
	// (CA for AA when MSH-15 is valued), and nothing when MSH-15 asks for
	// no ACK of that outcome (hl7.ShouldAck: NE, ER on acceptance).
	enhanced bool
	// late holds the ACK back until the next message arrives, and sends it
	// then, before that message's.
	late bool
}

// mllpReceiver is an MLLP server for tests: it answers each message as its
// script says and counts connections and messages.
type mllpReceiver struct {
	t      *testing.T
	ln     net.Listener
	addr   string
	script func(m *hl7.Message) answer
	done   chan struct{}
	wg     sync.WaitGroup

	mu          sync.Mutex
	conns       map[net.Conn]bool
	accepted    int
	open        int
	maxOpen     int
	inFlight    int
	maxInFlight int
	received    []string // control IDs, in arrival order
	peerNames   []string // TLS client certificate CNs
}

// startReceiver starts a receiver on 127.0.0.1 (TLS when cfg is not nil).
func startReceiver(t *testing.T, cfg *tls.Config, script func(m *hl7.Message) answer) *mllpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	if script == nil {
		script = func(*hl7.Message) answer { return answer{} }
	}
	r := &mllpReceiver{t: t, ln: ln, addr: ln.Addr().String(), script: script, done: make(chan struct{}), conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.stop)
	return r
}

func (r *mllpReceiver) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns[c] = true
		r.accepted++
		r.open++
		r.maxOpen = max(r.maxOpen, r.open)
		r.mu.Unlock()
		r.wg.Add(1)
		go r.serve(c)
	}
}

func (r *mllpReceiver) serve(c net.Conn) {
	defer r.wg.Done()
	defer func() {
		c.Close()
		r.mu.Lock()
		delete(r.conns, c)
		r.open--
		r.mu.Unlock()
	}()
	if tc, ok := c.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return
		}
		if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
			r.mu.Lock()
			r.peerNames = append(r.peerNames, certs[0].Subject.CommonName)
			r.mu.Unlock()
		}
	}
	fr := hl7.NewFrameReader(c, 1<<20)
	var late [][]byte // ACKs held back (answer.late)
	for {
		payload, err := fr.ReadFrame()
		if err != nil {
			return
		}
		for _, ack := range late {
			_ = hl7.WriteFrame(c, ack)
		}
		late = nil
		m, err := hl7.Parse(payload)
		if err != nil {
			_ = hl7.WriteFrame(c, hl7.NakUnparsable(err.Error()))
			continue
		}
		r.mu.Lock()
		r.received = append(r.received, m.ControlID())
		r.inFlight++
		r.maxInFlight = max(r.maxInFlight, r.inFlight)
		r.mu.Unlock()
		a := r.script(m)
		if a.delay > 0 {
			time.Sleep(a.delay)
		}
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
		switch {
		case a.stall:
			continue // never answer; the next read sees the sender hang up
		case a.drop:
			return
		case a.raw != "":
			_ = hl7.WriteFrame(c, []byte(a.raw))
		default:
			code := a.code
			if code == "" {
				code = hl7.AA
				if a.enhanced {
					code = hl7.AcceptCode(m, hl7.Accept)
				}
			}
			if a.enhanced && !hl7.ShouldAck(m, code) {
				continue
			}
			ack := hl7.Ack(m, code, a.reason)
			if a.controlID != nil {
				ack = []byte(strings.Replace(string(ack), "|"+m.ControlID()+"\r", "|"+*a.controlID+"\r", 1))
			}
			if a.noCR {
				_, _ = c.Write(append(append([]byte{hl7.StartBlock}, ack...), hl7.EndBlock))
				continue
			}
			if a.late {
				late = append(late, ack)
				continue
			}
			_ = hl7.WriteFrame(c, ack)
		}
	}
}

// closeConnections closes every open connection from the receiver's side,
// as a receiver's idle timeout does, and waits until they are gone.
func (r *mllpReceiver) closeConnections() {
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	waitFor(r.t, "the receiver's connections to close", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.open == 0
	})
}

func (r *mllpReceiver) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	close(r.done)
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// stats returns connections accepted and open, and messages received.
func (r *mllpReceiver) stats() (accepted, open int, received []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted, r.open, append([]string(nil), r.received...)
}

// mllpOutbound is an MLLP outbound to addr with test-friendly timings.
func mllpOutbound(addr string) config.Outbound {
	return config.Outbound{
		Name: "lab", Type: config.OutboundMLLP, Address: addr, Connections: 1,
		RetryBaseSeconds: 0.05, RetryMaxSeconds: 1, TimeoutSeconds: 5,
	}
}

// newTestMLLPSender returns the MLLP sender for o, closed at cleanup.
func newTestMLLPSender(t *testing.T, o config.Outbound) *mllpSender {
	t.Helper()
	s, err := NewSender(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*mllpSender)
}

func TestMLLPSenderDeliversOverOnePersistentConnection(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, nil)
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	for i := range 5 {
		if err := s.Send(t.Context(), testMessage(fmt.Sprintf("C%d", i))); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	accepted, _, received := r.stats()
	if accepted != 1 {
		t.Errorf("%d connections for 5 messages, want 1 reused", accepted)
	}
	if strings.Join(received, ",") != "C0,C1,C2,C3,C4" {
		t.Errorf("received %v", received)
	}
}

func TestMLLPSenderAckCodes(t *testing.T) {
	t.Parallel()
	codes := map[string]answer{
		"AA": {code: hl7.AA}, "CA": {code: hl7.CA},
		"AE": {code: hl7.AE, reason: "database locked"}, "CE": {code: hl7.CE},
		"AR": {code: hl7.AR, reason: "unknown patient"}, "CR": {code: hl7.CR},
	}
	r := startReceiver(t, nil, func(m *hl7.Message) answer { return codes[m.ControlID()] })
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	for _, tt := range []struct {
		code     string
		ok, perm bool
		says     string
	}{
		{"AA", true, false, ""},
		{"CA", true, false, ""},
		{"AE", false, false, `mllp lab: receiver answered AE to control id "AE" (queue id 42): error 207 database locked`},
		{"CE", false, false, "receiver answered CE"},
		{"AR", false, true, `mllp lab: receiver rejected control id "AR" (queue id 42) with AR: error 207 unknown patient`},
		{"CR", false, true, "with CR"},
	} {
		err := s.Send(t.Context(), testMessage(tt.code))
		if tt.ok {
			if err != nil {
				t.Errorf("%s: %v", tt.code, err)
			}
			continue
		}
		wantDeliveryError(t, err, tt.perm, tt.says)
	}
	// An AE or AR is a clean answer: the connection stays.
	if accepted, _, _ := r.stats(); accepted != 1 {
		t.Errorf("%d connections, want 1: AE/AR must not close the connection", accepted)
	}
}

// A message whose control id is not UTF-8 (Latin-1) is stored with it made
// valid (storage.ValidText); the receiver's ACK echoes the bytes it was
// sent, and that is what the sender waits for.
func TestMLLPSenderMatchesTheAckToTheControlIDAsSent(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, nil)
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	m := testMessage("L\xc41")
	m.ControlID = "L\uFFFD1" // as stored
	if err := s.Send(t.Context(), m); err != nil {
		t.Fatalf("send: %v", err)
	}
}

func TestMLLPSenderControlIDMismatchClosesConnection(t *testing.T) {
	t.Parallel()
	other := "SOMEONE-ELSE"
	var mismatch sync.Once
	r := startReceiver(t, nil, func(m *hl7.Message) answer {
		a := answer{}
		mismatch.Do(func() { a.controlID = &other })
		return a
	})
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	err := s.Send(t.Context(), testMessage("MSG1"))
	wantDeliveryError(t, err, false, `ACK for another control id while waiting for "MSG1" (queue id 42): connection out of step, closed: the ACK's control id: "SOMEONE-ELSE"`)
	if logged := forLog(err, false).Error(); strings.Contains(logged, other) {
		t.Errorf("the log form %q quotes the receiver's MSA-2", logged)
	}
	if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if accepted, _, _ := r.stats(); accepted != 2 {
		t.Errorf("%d connections, want 2: the out-of-step connection must be replaced", accepted)
	}
}

// A receiver that cannot read a message's control ID rejects it with an
// empty MSA-2: mf's own listener answers so a message above its
// max_message_bytes. That is this message's rejection (the connection
// carries one message at a time, and nothing came before it was written),
// not an ACK out of step: it was retried forever, the same message sent
// again and refused again, never held for an operator. An acceptance with
// an empty MSA-2 still counts for nothing.
func TestMLLPSenderRejectionWithoutControlIDIsPermanent(t *testing.T) {
	t.Parallel()
	nak := string(hl7.NakUnparsableCondition(hl7.CondSegmentSequence, "message larger than 100 bytes"))
	blank := ""
	r := startReceiver(t, nil, func(m *hl7.Message) answer {
		switch m.ControlID() {
		case "BIG":
			return answer{raw: nak}
		case "", "  ":
			return answer{code: hl7.AR, reason: "no control id"}
		}
		return answer{controlID: &blank}
	})
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	err := s.Send(t.Context(), testMessage("BIG"))
	wantDeliveryError(t, err, true, `mllp lab: receiver rejected control id "BIG" (queue id 42) with AR, without naming its control id (MSA-2 empty): it could not read the message; connection closed`)
	waitFor(t, "the connection to close", func() bool { _, open, _ := r.stats(); return open == 0 })
	err = s.Send(t.Context(), testMessage("MSG1"))
	wantDeliveryError(t, err, false, `ACK for another control id while waiting for "MSG1"`)

	// A message without a control ID is answered with an empty MSA-2: an
	// ordinary rejection, on a connection that stays.
	accepted, _, _ := r.stats()
	err = s.Send(t.Context(), testMessage(""))
	wantDeliveryError(t, err, true, `mllp lab: receiver rejected control id "" (queue id 42) with AR: error 207 no control id`)
	if err := s.Send(t.Context(), testMessage("")); !IsPermanent(err) {
		t.Fatalf("again: %v", err)
	}
	// Nor is one of only blanks, which names no message either (mf's
	// listener answers it so): the same rejection, not one of a message
	// the receiver could not read.
	err = s.Send(t.Context(), testMessage("  "))
	wantDeliveryError(t, err, true, `mllp lab: receiver rejected control id "  " (queue id 42) with AR: error 207 no control id`)
	if now, _, _ := r.stats(); now != accepted+1 {
		t.Errorf("%d connections for three rejections, want 1", now-accepted)
	}
}

// A receiver that refuses a message too large for it may answer as soon as
// it has read its limit, and close without reading the rest: the write then
// fails (broken pipe, reset), but the receiver's answer came before, and it
// says what became of the message. Taken for a broken connection, the
// message was sent again and again, the operator told only of a broken
// pipe. Not parallel: its large write would starve the timing of others.
func TestMLLPSenderTakesTheAnswerThatCameBeforeTheWriteFailed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close() // with the rest unread: a reset
				if _, err := hl7.NewFrameReader(c, 1000).ReadFrame(); err != nil {
					_ = hl7.WriteFrame(c, hl7.NakUnparsableCondition(hl7.ConditionOf(err), "message larger than 1000 bytes"))
				}
			}()
		}
	}()
	s := newTestMLLPSender(t, mllpOutbound(ln.Addr().String()))
	m := testMessage("BIG")
	m.Payload = append(m.Payload, "OBX|1|ED|PDF||"+strings.Repeat("A", 16<<20)+"\r"...)
	err = s.Send(t.Context(), m)
	wantDeliveryError(t, err, true, `mllp lab: receiver rejected control id "BIG" (queue id 42) with AR`)
}

func TestMLLPSenderUnreadableReply(t *testing.T) {
	t.Parallel()
	for name, raw := range map[string]string{
		"not HL7":     "HTTP/1.1 400 Bad Request",
		"no MSA":      "MSH|^~\\&|LAB|LABFAC|MF|HOSP|20240101||ACK|X|P|2.5",
		"bad MSA-1":   "MSH|^~\\&|LAB|LABFAC|MF|HOSP|20240101||ACK|X|P|2.5\rMSA|OK|MSG1",
		"bad framing": "\x0b",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := startReceiver(t, nil, func(*hl7.Message) answer {
				if raw == "\x0b" {
					return answer{drop: true}
				}
				return answer{raw: raw}
			})
			s := newTestMLLPSender(t, mllpOutbound(r.addr))
			err := s.Send(t.Context(), testMessage("MSG1"))
			says := "unreadable reply to control id \"MSG1\" (queue id 42); connection closed"
			if raw == "\x0b" {
				says = "exchange for control id \"MSG1\" (queue id 42) failed; connection closed"
			}
			wantDeliveryError(t, err, false, says)
			waitFor(t, "the connection to close", func() bool { _, open, _ := r.stats(); return open == 0 })
		})
	}
}

func TestMLLPSenderReceiverDropsConnection(t *testing.T) {
	t.Parallel()
	var drop sync.Once
	r := startReceiver(t, nil, func(*hl7.Message) answer {
		a := answer{}
		drop.Do(func() { a.drop = true })
		return a
	})
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	err := s.Send(t.Context(), testMessage("MSG1"))
	de := wantDeliveryError(t, err, false, "reading the ACK")
	if !errors.Is(de, hl7.ErrNotFramed) && !strings.Contains(de.Error(), "EOF") && !strings.Contains(de.Error(), "reset") {
		t.Errorf("error %v: want the connection's end", de)
	}
	if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatalf("retry on a new connection: %v", err)
	}
}

// A receiver that closes an idle connection (its idle timeout) costs no
// failed delivery: the sender notices and dials again before sending.
func TestMLLPSenderRedialsAfterIdleClose(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, nil)
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatal(err)
	}
	r.closeConnections()
	waitFor(t, "the sender to see the connection closed", func() bool {
		c := <-s.slots
		defer func() { s.slots <- c }()
		return c != nil && len(c.replies) > 0
	})
	if err := s.Send(t.Context(), testMessage("MSG2")); err != nil {
		t.Fatalf("Send after the receiver closed the idle connection: %v", err)
	}
	if accepted, _, received := r.stats(); accepted != 2 || len(received) != 2 {
		t.Errorf("accepted %d, received %v", accepted, received)
	}
}

// A receiver that takes one message per connection closes it shortly after
// its ACK: the sender's next message, on that connection before the close
// reached it, goes unanswered. It is sent again at once on a new
// connection, not failed: failed, every second message of such a receiver
// waited out the lane's backoff and counted an attempt (with max_attempts
// = 1, was set aside).
func TestMLLPSenderResendsAtOnceWhatAReusedConnectionClosedOn(t *testing.T) {
	t.Parallel()
	addr, seen := closingReceiver(t, func(c net.Conn) func() (string, func(), error) {
		fr := hl7.NewFrameReader(c, 1<<20)
		return func() (string, func(), error) {
			p, err := fr.ReadFrame()
			if err != nil {
				return "", nil, err
			}
			m, _ := hl7.Parse(p)
			return m.ControlID(), func() { _ = hl7.WriteFrame(c, hl7.Ack(m, hl7.AA, "")) }, nil
		}
	})
	s := newTestMLLPSender(t, mllpOutbound(addr))
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

func TestMLLPSenderStalledReceiverHitsDeadline(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, func(*hl7.Message) answer { return answer{stall: true} })

	t.Run("ctx deadline", func(t *testing.T) {
		s := newTestMLLPSender(t, mllpOutbound(r.addr))
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := s.Send(ctx, testMessage("MSG1"))
		took := time.Since(start)
		de := wantDeliveryError(t, err, false, `no ACK for control id "MSG1" (queue id 42) in time; connection closed`)
		if !errors.Is(de, context.DeadlineExceeded) {
			t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
		}
		if took < 190*time.Millisecond || took > 2*time.Second {
			t.Errorf("Send took %v, want about the 200ms deadline", took)
		}
	})
	t.Run("timeout_seconds without ctx deadline", func(t *testing.T) {
		o := mllpOutbound(r.addr)
		o.TimeoutSeconds = 0.2
		s := newTestMLLPSender(t, o)
		start := time.Now()
		err := s.Send(context.Background(), testMessage("MSG2"))
		wantDeliveryError(t, err, false, "in time")
		if took := time.Since(start); took < 190*time.Millisecond || took > 2*time.Second {
			t.Errorf("Send took %v, want about timeout_seconds", took)
		}
	})
}

// A receiver that ends its ACK with 0x1C and no CR has answered, but the
// frame never ends: the send times out, and the message is sent again, and
// again. The error must say so, not that the receiver was slow (a longer
// timeout_seconds, which that suggests, cannot help).
func TestMLLPSenderAckWithoutCRSaysSo(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, func(*hl7.Message) answer { return answer{noCR: true} })
	o := mllpOutbound(r.addr)
	o.TimeoutSeconds = 0.3
	s := newTestMLLPSender(t, o)
	err := s.Send(context.Background(), testMessage("MSG1"))
	wantDeliveryError(t, err, false, `the ACK for control id "MSG1" (queue id 42) did not end: its end block (0x1C) was not followed by CR (0x0D)`)
	waitFor(t, "the connection to close", func() bool { _, open, _ := r.stats(); return open == 0 })
}

func TestMLLPSenderWaitsForAFreeConnection(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	r := startReceiver(t, nil, func(m *hl7.Message) answer {
		if m.ControlID() == "SLOW" {
			<-release
		}
		return answer{}
	})
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	slow := make(chan error, 1)
	go func() { slow <- s.Send(t.Context(), testMessage("SLOW")) }()
	waitFor(t, "the slow message to arrive", func() bool { _, _, rec := r.stats(); return len(rec) == 1 })

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err := s.Send(ctx, testMessage("FAST"))
	wantDeliveryError(t, err, false, "mllp lab: no free connection (of 1) for queue id 42")

	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if err := s.Send(t.Context(), testMessage("FAST")); err != nil {
		t.Fatal(err)
	}
}

// A Send that waited for the connection until too little of its time was
// left for the ACK gives up without writing. Written, the message would
// reach the receiver, time out before its ACK, close the connection and be
// sent again: a duplicate.
func TestMLLPSenderWritesNothingWithoutTimeForTheAck(t *testing.T) {
	t.Parallel()
	const ackLatency = 300 * time.Millisecond
	release := make(chan struct{})
	r := startReceiver(t, nil, func(m *hl7.Message) answer {
		if m.ControlID() == "HELD" {
			<-release
			return answer{}
		}
		return answer{delay: ackLatency}
	})
	s := newTestMLLPSender(t, mllpOutbound(r.addr))

	held := make(chan error, 1)
	go func() { held <- s.Send(t.Context(), testMessage("HELD")) }()
	waitFor(t, "HELD to hold the only connection", func() bool { _, _, rec := r.stats(); return len(rec) == 1 })

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	late := make(chan error, 1)
	go func() { late <- s.Send(ctx, testMessage("LATE")) }()
	// The connection comes free when less than ackLatency of LATE's second
	// is left: too late to write. The timer only sets the scene for a
	// sender that would still wait then.
	select {
	case err := <-late:
		late <- err
	case <-time.After(800 * time.Millisecond):
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("HELD: %v", err)
	}
	err := <-late
	_, _, received := r.stats()
	if !errors.Is(err, errNotWritten) {
		t.Fatalf("LATE failed with %v (the receiver got %v); want it not written (errNotWritten)", err, received)
	}
	wantDeliveryError(t, err, false, "mllp lab: no free connection (of 1) for queue id 42 within")

	// Retried (as its lane does), it arrives once, on the same connection.
	if err := s.Send(t.Context(), testMessage("LATE")); err != nil {
		t.Fatalf("LATE retried: %v", err)
	}
	accepted, _, received := r.stats()
	if strings.Join(received, ",") != "HELD,LATE" || accepted != 1 {
		t.Errorf("the receiver got %v over %d connections; want HELD,LATE once each over 1", received, accepted)
	}
}

// Many lanes sharing one connection to a receiver that takes a while: each
// lane retries what failed, as a lane does, and the receiver gets every
// message once, over the one connection.
func TestMLLPSenderDeliversEachMessageOnceUnderContention(t *testing.T) {
	t.Parallel()
	// 30 lanes × 50 ms is 1.5 s of queue for a 1 s timeout: a Send waits
	// for the connection longer than the timeout allows.
	const lanes, perLane, maxTries = 30, 2, 100
	r := startReceiver(t, nil, func(*hl7.Message) answer { return answer{delay: 50 * time.Millisecond} })
	o := mllpOutbound(r.addr)
	o.TimeoutSeconds = 1
	s := newTestMLLPSender(t, o)

	var notWritten, otherFailures atomic.Int64
	var wg sync.WaitGroup
	for l := range lanes {
		wg.Add(1)
		go func() { // one lane: one message at a time, retried until delivered
			defer wg.Done()
			for i := range perLane {
				id := fmt.Sprintf("L%d-%d", l, i)
				for try := 1; ; try++ {
					err := s.Send(context.Background(), testMessage(id))
					if err == nil {
						break
					}
					if errors.Is(err, errNotWritten) {
						notWritten.Add(1)
					} else {
						otherFailures.Add(1)
					}
					if try == maxTries {
						t.Errorf("%s: not delivered in %d tries: %v", id, maxTries, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()

	accepted, _, received := r.stats()
	times := map[string]int{}
	var duplicated []string
	for _, id := range received {
		if times[id]++; times[id] == 2 {
			duplicated = append(duplicated, id)
		}
	}
	if len(times) != lanes*perLane || len(duplicated) > 0 || accepted != 1 {
		t.Errorf("the receiver got %d distinct messages of %d, %d received more than once (%v), over %d connections (want 1); failures: %d not written, %d others",
			len(times), lanes*perLane, len(duplicated), duplicated, accepted, notWritten.Load(), otherFailures.Load())
	}
	if notWritten.Load() == 0 {
		t.Errorf("no Send gave up waiting for the connection: the test did not make the contention it is about")
	}
}

func TestMLLPSenderConcurrentSends(t *testing.T) {
	t.Parallel()
	for _, conns := range []int{1, 3} {
		t.Run(fmt.Sprintf("connections=%d", conns), func(t *testing.T) {
			t.Parallel()
			r := startReceiver(t, nil, func(*hl7.Message) answer { return answer{delay: time.Millisecond} })
			o := mllpOutbound(r.addr)
			o.Connections = conns
			s := newTestMLLPSender(t, o)

			const lanes, perLane = 8, 25
			var wg sync.WaitGroup
			errs := make(chan error, lanes*perLane)
			for l := range lanes {
				wg.Add(1)
				go func() { // one lane: one message at a time
					defer wg.Done()
					for i := range perLane {
						if err := s.Send(t.Context(), testMessage(fmt.Sprintf("L%d-%d", l, i))); err != nil {
							errs <- err
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			accepted, _, received := r.stats()
			if len(received) != lanes*perLane {
				t.Fatalf("received %d messages, want %d", len(received), lanes*perLane)
			}
			// Each lane's messages arrived in its order.
			next := map[string]int{}
			for _, id := range received {
				var l, i int
				fmt.Sscanf(id, "L%d-%d", &l, &i)
				key := fmt.Sprint(l)
				if i != next[key] {
					t.Fatalf("lane %d: message %d arrived when %d was due", l, i, next[key])
				}
				next[key]++
			}
			r.mu.Lock()
			maxOpen, maxInFlight := r.maxOpen, r.maxInFlight
			r.mu.Unlock()
			if accepted != conns || maxOpen > conns {
				t.Errorf("%d connections accepted, %d open at once; want exactly %d", accepted, maxOpen, conns)
			}
			if maxInFlight > conns || (conns > 1 && maxInFlight < 2) {
				t.Errorf("%d messages in flight at once with %d connections", maxInFlight, conns)
			}
		})
	}
}

func TestMLLPSenderEmptyControlIDIsReadFromPayload(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, nil)
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	m := testMessage("FROM-MSH10")
	m.ControlID = ""
	if err := s.Send(t.Context(), m); err != nil {
		t.Fatal(err)
	}
}

func TestMLLPSenderUnframeablePayloadIsPermanent(t *testing.T) {
	t.Parallel()
	s := newTestMLLPSender(t, mllpOutbound("127.0.0.1:1"))
	m := testMessage("MSG1")
	m.Payload = append(m.Payload, 0x1c)
	wantDeliveryError(t, s.Send(t.Context(), m), true, "queue id 42 cannot be sent over MLLP")
}

func TestMLLPSenderClose(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, func(*hl7.Message) answer { return answer{stall: true} })
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	inFlight := make(chan error, 1)
	go func() { inFlight <- s.Send(context.Background(), testMessage("MSG1")) }()
	waitFor(t, "the message to arrive", func() bool { _, _, rec := r.stats(); return len(rec) == 1 })

	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	err := <-inFlight
	wantDeliveryError(t, err, false, "interrupted")
	if !errors.Is(err, errSenderClosed) {
		t.Errorf("error %v does not wrap errSenderClosed", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v with a Send in flight", took)
	}
	wantDeliveryError(t, s.Send(t.Context(), testMessage("MSG2")), false, "not sent")
	waitFor(t, "the connection to close", func() bool { _, open, _ := r.stats(); return open == 0 })
	if err := s.Close(); err != nil { // twice is fine
		t.Fatal(err)
	}
}

// fakeClock is a settable clock for the dial backoff.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestDialBackoff(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	b := newDialBackoff(time.Second, 10*time.Second)
	b.now = clock.now
	b.jitter = func(d time.Duration) time.Duration { return d }

	if _, _, ok := b.allow(); !ok {
		t.Fatal("a first dial must be allowed")
	}
	dialErr := errors.New("connection refused")
	for i, want := range []time.Duration{1, 2, 4, 8, 10, 10} {
		if got := b.failed(dialErr); got != want*time.Second {
			t.Fatalf("failure %d: wait %v, want %v", i+1, got, want*time.Second)
		}
		next, last, ok := b.allow()
		if ok || !next.Equal(clock.now().Add(want*time.Second)) || last != dialErr {
			t.Fatalf("failure %d: allow() = %v, %v, %v", i+1, next, last, ok)
		}
		clock.advance(want*time.Second - time.Millisecond)
		if _, _, ok := b.allow(); ok {
			t.Fatalf("failure %d: dial allowed before the backoff elapsed", i+1)
		}
		clock.advance(time.Millisecond)
		if _, _, ok := b.allow(); !ok {
			t.Fatalf("failure %d: dial not allowed once the backoff elapsed", i+1)
		}
	}
	b.succeeded()
	if got := b.failed(dialErr); got != time.Second {
		t.Fatalf("after a success the backoff restarts from base: got %v", got)
	}

	// Hundreds of failures neither overflow nor pass the cap.
	for range 500 {
		if d := b.failed(dialErr); d <= 0 || d > 10*time.Second {
			t.Fatalf("wait %v out of (0, max]", d)
		}
	}
}

func TestDialBackoffJitter(t *testing.T) {
	t.Parallel()
	b := newDialBackoff(time.Second, time.Minute)
	seen := map[time.Duration]bool{}
	for range 200 {
		b.succeeded()
		b.failed(nil)
		b.failed(nil)
		d := b.failed(nil) // third failure: 4s before jitter
		if d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("jittered wait %v outside [2s, 4s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("only %d distinct waits in 200: no jitter?", len(seen))
	}
	// Defaults when the outbound was not defaulted.
	if d := newDialBackoff(0, 0); d.base != defaultRetryBase || d.max != defaultRetryMax {
		t.Errorf("defaults: base %v, max %v", d.base, d.max)
	}
}

func TestMLLPSenderReconnectBackoff(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, nil)
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	clock := &fakeClock{t: time.Now()}
	s.backoff.now = clock.now
	s.backoff.jitter = func(d time.Duration) time.Duration { return d }

	// The receiver is "down" until up is set: dials are counted.
	var mu sync.Mutex
	up, dials := false, 0
	realDial := s.dial
	s.dial = func(ctx context.Context) (net.Conn, error) {
		mu.Lock()
		dials++
		isUp := up
		mu.Unlock()
		if !isUp {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
		}
		return realDial(ctx)
	}
	dialCount := func() int { mu.Lock(); defer mu.Unlock(); return dials }

	err := s.Send(t.Context(), testMessage("MSG1"))
	wantDeliveryError(t, err, false, "mllp lab: dial "+r.addr+" failed; next dial in 50ms: not written: dial tcp: connection refused")

	// Within the backoff: no dial at all, and the error says when.
	for range 3 {
		err = s.Send(t.Context(), testMessage("MSG1"))
		wantDeliveryError(t, err, false, "mllp lab: "+r.addr+" unreachable; next dial allowed at ")
	}
	if n := dialCount(); n != 1 {
		t.Fatalf("%d dials during the backoff, want 1", n)
	}

	clock.advance(50 * time.Millisecond)
	err = s.Send(t.Context(), testMessage("MSG1"))
	wantDeliveryError(t, err, false, "next dial in 100ms") // doubled
	if n := dialCount(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}

	mu.Lock()
	up = true
	mu.Unlock()
	clock.advance(100 * time.Millisecond)
	if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatalf("Send once the receiver is up: %v", err)
	}
	// The success reset the backoff: the next failure waits base again.
	if d := s.backoff.failed(nil); d != 50*time.Millisecond {
		t.Errorf("after a successful dial the backoff restarts at base; got %v", d)
	}
}

func TestMLLPSenderRealRefusedDial(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	o := mllpOutbound(addr)
	o.RetryBaseSeconds, o.RetryMaxSeconds = 60, 60
	s := newTestMLLPSender(t, o)
	wantDeliveryError(t, s.Send(t.Context(), testMessage("MSG1")), false, "dial "+addr+" failed; next dial in")
	start := time.Now()
	wantDeliveryError(t, s.Send(t.Context(), testMessage("MSG1")), false, "unreachable; next dial allowed at")
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("a Send during the backoff took %v: it must fail fast", took)
	}
}

// testPKI is a CA with a server and a client certificate, as PEM files.
type testPKI struct {
	caFile                string
	caPool                *x509.CertPool
	server                tls.Certificate
	clientCert, clientKey string

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// newTestPKI issues a CA, a server certificate for dnsNames and ips, and a
// client certificate with CN "mf-test-client".
func newTestPKI(t *testing.T, dnsNames []string, ips []net.IP) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mf test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := &testPKI{caFile: filepath.Join(dir, "ca.pem"), caPool: x509.NewCertPool(), ca: ca, caKey: caKey}
	p.caPool.AddCert(ca)
	writePEM(t, p.caFile, "CERTIFICATE", caDER)

	srvDER, srvKey := p.issue(t, 2, "mf test server", x509.ExtKeyUsageServerAuth, dnsNames, ips)
	p.server = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}

	p.clientCert, p.clientKey = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	p.writeClient(t, 3, "mf-test-client")
	return p
}

// issue makes a certificate of the PKI's CA, valid for an hour.
func (p *testPKI) issue(t *testing.T, serial int64, cn string, usage x509.ExtKeyUsage, dnsNames []string, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: dnsNames, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// writeClient issues a client certificate with CN cn and writes it and its
// key to the PKI's clientCert and clientKey: a renewal, after the first.
func (p *testPKI) writeClient(t *testing.T, serial int64, cn string) {
	t.Helper()
	der, key := p.issue(t, serial, cn, x509.ExtKeyUsageClientAuth, nil, nil)
	writePEM(t, p.clientCert, "CERTIFICATE", der)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	writePEM(t, p.clientKey, "EC PRIVATE KEY", keyDER)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serverTLS requires client certificates issued by the PKI's CA.
func (p *testPKI) serverTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.caPool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

// mutualTLS starts a receiver that requires client certificates of a new
// PKI, and returns a sender to it presenting the PKI's client certificate.
func mutualTLS(t *testing.T) (*testPKI, *mllpReceiver, *mllpSender) {
	t.Helper()
	pki := newTestPKI(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
	r := startReceiver(t, pki.serverTLS(), nil)
	o := mllpOutbound(r.addr)
	o.TLS, o.TLSCA, o.TLSCert, o.TLSKey = true, pki.caFile, pki.clientCert, pki.clientKey
	return pki, r, newTestMLLPSender(t, o)
}

func TestMLLPSenderMutualTLS(t *testing.T) {
	t.Parallel()
	_, r, s := mutualTLS(t)
	for i := range 3 {
		if err := s.Send(t.Context(), testMessage(fmt.Sprint("TLS", i))); err != nil {
			t.Fatalf("Send over mutual TLS: %v", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.accepted != 1 || len(r.peerNames) != 1 || r.peerNames[0] != "mf-test-client" {
		t.Errorf("accepted %d, client certificates %v", r.accepted, r.peerNames)
	}
}

// A client certificate renewed on disk is what the destination's next
// connection presents, without a reload: the sender read tls_cert and
// tls_key at start only, and presented the old certificate until it
// expired and the receiver refused it.
func TestMLLPSenderPresentsARenewedClientCertificate(t *testing.T) {
	t.Parallel()
	pki, r, s := mutualTLS(t)
	if err := s.Send(t.Context(), testMessage("BEFORE")); err != nil {
		t.Fatalf("Send over mutual TLS: %v", err)
	}

	pki.writeClient(t, 4, "mf-test-client-renewed")
	peers := func() []string {
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.Clone(r.peerNames)
	}
	waitFor(t, "a connection presenting the renewed certificate", func() bool {
		r.closeConnections() // the next Send dials, and handshakes, again
		if err := s.Send(t.Context(), testMessage("AFTER")); err != nil {
			t.Fatalf("Send after the renewal: %v", err)
		}
		p := peers()
		return p[len(p)-1] == "mf-test-client-renewed"
	})
	if p := peers(); p[0] != "mf-test-client" {
		t.Errorf("client certificates presented %v; want mf-test-client first", p)
	}
}

func TestMLLPSenderTLSServerNameOverride(t *testing.T) {
	t.Parallel()
	// The certificate names mllp.test only; the address is an IP.
	pki := newTestPKI(t, []string{"mllp.test"}, nil)
	r := startReceiver(t, pki.serverTLS(), nil)

	o := mllpOutbound(r.addr)
	o.TLS, o.TLSCA, o.TLSCert, o.TLSKey = true, pki.caFile, pki.clientCert, pki.clientKey
	s := newTestMLLPSender(t, o)
	err := s.Send(t.Context(), testMessage("MSG1"))
	wantDeliveryError(t, err, false, "certificate")

	o.ServerName = "mllp.test"
	s = newTestMLLPSender(t, o)
	if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatalf("Send with server_name = mllp.test: %v", err)
	}
}

func TestMLLPSenderTLSFailures(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
	other := newTestPKI(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
	r := startReceiver(t, pki.serverTLS(), nil)

	t.Run("unknown CA", func(t *testing.T) {
		o := mllpOutbound(r.addr)
		o.TLS, o.TLSCA, o.TLSCert, o.TLSKey = true, other.caFile, pki.clientCert, pki.clientKey
		err := newTestMLLPSender(t, o).Send(t.Context(), testMessage("MSG1"))
		wantDeliveryError(t, err, false, "certificate signed by unknown authority")
	})
	t.Run("no client certificate", func(t *testing.T) {
		o := mllpOutbound(r.addr)
		o.TLS, o.TLSCA = true, pki.caFile
		err := newTestMLLPSender(t, o).Send(t.Context(), testMessage("MSG1"))
		// TLS 1.3 reports the server's refusal on the first read: before
		// the frame's write, when it has come by then (the connection is
		// found closed), or after it; either way the server's TLS took
		// none of it.
		wantDeliveryError(t, err, false, "set tls_cert and tls_key")
		wantNotWritten(t, err)
	})
	t.Run("plaintext to a TLS receiver", func(t *testing.T) {
		o := mllpOutbound(r.addr)
		o.TimeoutSeconds = 1
		err := newTestMLLPSender(t, o).Send(t.Context(), testMessage("MSG1"))
		wantDeliveryError(t, err, false, "mllp lab:")
	})
	if _, _, received := r.stats(); len(received) != 0 {
		t.Errorf("the receiver got %v over failed TLS", received)
	}
}

func TestOutboundTLSConfig(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t, nil, nil)
	cfg, err := OutboundTLSConfig(config.Outbound{TLS: true, TLSCA: pki.caFile, TLSCert: pki.clientCert, TLSKey: pki.clientKey, ServerName: "x.test"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 || cfg.ServerName != "x.test" || cfg.RootCAs == nil || cfg.GetClientCertificate == nil || cfg.InsecureSkipVerify {
		t.Errorf("config %+v", cfg)
	}
	cfg, err = OutboundTLSConfig(config.Outbound{TLS: true})
	if err != nil || cfg.RootCAs != nil {
		t.Errorf("without tls_ca the system roots are used: %v, %v", cfg.RootCAs, err)
	}
}

func TestMLLPJudgeQuotesAShortenedReason(t *testing.T) {
	t.Parallel()
	s := &mllpSender{name: "lab"}
	m, err := hl7.Parse(testMessage("MSG1").Payload)
	if err != nil {
		t.Fatal(err)
	}
	j := s.judge(hl7.Ack(m, hl7.AE, strings.Repeat("é", 300)), m, "MSG1", 42, false)
	if j == nil || j.closeConn || j.Permanent {
		t.Fatalf("judgement %+v", j)
	}
	msg := j.Error()
	if !strings.HasSuffix(msg, "...") || !utf8.ValidString(msg) || len(msg) > 300 {
		t.Errorf("reason %q: want the receiver's text cut to about %d bytes, between characters", msg, mllpReasonMax)
	}
	if j := s.judge(hl7.Ack(m, hl7.AA, ""), m, "MSG1", 42, false); j != nil {
		t.Errorf("AA judged %v", j)
	}
}

func TestMLLPJudgeReadsAnAckInItsMessagesCharacterSet(t *testing.T) {
	t.Parallel()
	s := &mllpSender{name: "lab"}
	// A BIG-5 message whose control id ends in 院 (B0 7C), answered by a
	// receiver whose ACK declares no character set: its MSA-2 echoes the
	// bytes, read as the message's set. Read byte by byte it named B0
	// alone, and the message was sent again at every retry, for ever.
	big5, err := hl7.Parse([]byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|\xb0\x7c1|P|2.5||||||BIG-5\rPID|1||P1\r"))
	if err != nil {
		t.Fatal(err)
	}
	ack := []byte("MSH|^~\\&|C|D|A|B|20260101||ACK^A01|X1|P|2.5\rMSA|AA|\xb0\x7c1\r")
	if j := s.judge(ack, big5, big5.ControlID(), 43, false); j != nil {
		t.Errorf("the AA to a BIG-5 control id, its ACK without MSH-18, judged %v", j)
	}
}

// HL7 v2.3 to v2.5 give MSH-10 and MSA-2 20 characters, and a receiver of
// those versions may echo a longer control id cut to its first 20. Taken
// for an ACK of another message, every such message was sent again
// forever. A 20-character MSA-2 that begins the control id sent is its
// ACK; one that differs within its 20 characters, or is shorter, is not.
func TestMLLPSenderTakesAControlIDCutTo20Characters(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, func(m *hl7.Message) answer {
		id := m.ControlID()
		switch {
		case strings.HasPrefix(id, "OTHER"):
			other := "X" + id[1:20]
			return answer{controlID: &other}
		case strings.HasPrefix(id, "SHORT"):
			short := id[:19]
			return answer{controlID: &short}
		case len(id) > 20:
			cut := id[:20]
			return answer{controlID: &cut}
		}
		return answer{}
	})
	s := newTestMLLPSender(t, mllpOutbound(r.addr))
	long := "20261126040000123456-7f3a" // 25 characters, as a timestamp and a suffix
	if err := s.Send(t.Context(), testMessage(long)); err != nil {
		t.Fatalf("a 25-character control id acknowledged with its first 20: %v", err)
	}
	for _, id := range []string{"OTHER6040000123456-7f3a", "SHORT6040000123456-7f3a"} {
		if err := s.Send(t.Context(), testMessage(id)); err == nil {
			t.Fatalf("%s: an ACK whose MSA-2 is not the id's first 20 characters counted as its ACK", id)
		}
	}
}

// A send that dials and fails, and the sends of the destination's other
// lanes while its dial then backs off, write nothing: no attempt at the
// destination. Counted, the lanes of a receiver down for a few dials used
// up max_attempts and set their messages aside (or held them) in turn.
// They are errNotWritten, and say when the next dial is due (RetryAfter),
// so that the lane waits for it rather than polling.
func TestMLLPSenderWaitingOutTheDialBackoffWritesNothing(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused from now on
	o := mllpOutbound(addr)
	o.RetryBaseSeconds, o.RetryMaxSeconds = 30, 60 // a backoff that outlasts the test
	s := newTestMLLPSender(t, o)
	for i, msg := range []string{"MSG1", "MSG2"} { // the dial, then the wait for the next
		err = s.Send(t.Context(), testMessage(msg))
		de := &DeliveryError{}
		if !errors.As(err, &de) || !errors.Is(err, errNotWritten) || de.RetryAfter <= 0 || de.RetryAfter > 60*time.Second {
			t.Fatalf("send %d: %v (RetryAfter %v); want errNotWritten, due when the next dial is", i+1, err, de.RetryAfter)
		}
	}
}

// A wait is never longer than retry_max_seconds: the ±20% jitter was added
// after the cap, so a lane at the cap (300 s by default) waited up to 360 s.
func TestBackoffStaysWithinItsCap(t *testing.T) {
	t.Parallel()
	for range 1000 {
		if d := Backoff(20, time.Second, 300*time.Second); d > 300*time.Second || d < 240*time.Second {
			t.Fatalf("Backoff at the cap of 300s: %v; want within [240s, 300s]", d)
		}
	}
}

// The backoffs of an outbound whose retry_base_seconds and
// retry_max_seconds are as long as the config takes (the engine's longest
// time, about 292 years) stay positive and within their cap: doubling a
// wait over half the longest time wrapped it negative, and the lane's
// jitter (up to 1.2 times the cap) came out of range as a negative
// time.Duration. A negative retry is due at once, again and again, and
// the dial's jitter panicked on one (rand.N of a negative number).
func TestBackoffsOfTheLongestDurationsDoNotOverflow(t *testing.T) {
	t.Parallel()
	longest := time.Duration(9_223_372_036) * time.Second // retry_max_seconds at its largest
	for _, base := range []time.Duration{time.Second, 5_000_000_000 * time.Second, longest} {
		for n := int64(1); n <= 70; n++ {
			for range 20 {
				if d := Backoff(n, base, longest); d <= 0 {
					t.Fatalf("Backoff(%d, %v, %v) = %v, want a positive wait", n, base, longest, d)
				}
			}
		}
		b := newDialBackoff(base, longest)
		for i := 1; i <= 70; i++ {
			var d time.Duration
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("dial backoff from %v, failure %d: panic %v", base, i, r)
					}
				}()
				d = b.failed(nil)
			}()
			if d <= 0 || d > longest {
				t.Fatalf("dial backoff from %v, failure %d: wait %v out of (0, %v]", base, i, d, longest)
			}
		}
	}
}

// A message whose MSH-15 is NE or ER asks a receiver in enhanced mode for
// no ACK when it accepts it, and mf's own listener sends none. Waited for,
// each such message timed out, was sent again, and timed out again,
// forever, its lane blocked behind it. Written whole, it is delivered; the
// messages after it go on the same connection, in order, each once.
func TestMLLPSenderDoesNotWaitForAnAckMSH15AsksNoneOf(t *testing.T) {
	t.Run("one connection", testMLLPSenderDoesNotWaitForAnAckMSH15AsksNoneOf)
	// With several connections the lane's next message could go on another
	// connection, read by the receiver before this one: it is waited for.
	t.Run("several connections: waited for", func(t *testing.T) {
		t.Parallel()
		r := startReceiver(t, nil, func(*hl7.Message) answer { return answer{enhanced: true} })
		o := mllpOutbound(r.addr)
		o.TimeoutSeconds, o.Connections = 1, 2
		s := newTestMLLPSender(t, o)
		var logs logbuf.Buffer
		s.setLog(zerolog.New(&logs))
		for range 2 {
			if err := s.Send(t.Context(), testMessageAsking("NE1", "NE", 0)); err == nil || !strings.Contains(err.Error(), "no ACK") {
				t.Fatalf("NE1 over 2 connections: %v; want it waited for, and no ACK in time", err)
			}
		}
		if n := strings.Count(logs.String(), "set connections = 1"); n != 1 {
			t.Fatalf("%d warnings; want one:\n%s", n, logs.String())
		}
	})
}

func testMLLPSenderDoesNotWaitForAnAckMSH15AsksNoneOf(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, func(*hl7.Message) answer { return answer{enhanced: true} })
	o := mllpOutbound(r.addr)
	o.TimeoutSeconds = 2
	s := newTestMLLPSender(t, o)
	for _, m := range []Outgoing{
		testMessageAsking("NE1", "NE", 0),
		testMessageAsking("ER1", "ER", '#'), // read with its own separators
		testMessageAsking("NE2", "NE", 0),
		testMessageAsking("AL1", "AL", 0), // answered CA, and waited for
		testMessageAsking("NE3", "NE", '#'),
		testMessageAsking("SU1", "SU", 0), // answered CA on acceptance
	} {
		start := time.Now()
		if err := s.Send(t.Context(), m); err != nil {
			t.Fatalf("%s: %v", m.ControlID, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s took %v: it waited for an ACK its MSH-15 asks none of", m.ControlID, took)
		}
	}
	accepted, _, received := r.stats()
	if got := strings.Join(received, ","); got != "NE1,ER1,NE2,AL1,NE3,SU1" || accepted != 1 {
		t.Errorf("the receiver got %s over %d connections; want NE1,ER1,NE2,AL1,NE3,SU1 once each, over 1", got, accepted)
	}
}

// A receiver that ignores MSH-15 ACKs an NE message anyway, maybe late: its
// ACK is the answer to a message sent before, not the next message's out
// of step (which closed the connection and sent that message again) nor
// taken for it. Here NE1's ACK comes only when AL1 arrives, just before
// AL1's own; NE2's comes at once, while the connection is idle.
func TestMLLPSenderTakesTheAckOfAMessageItDidNotWaitFor(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, func(m *hl7.Message) answer {
		return answer{late: m.ControlID() == "NE1"}
	})
	o := mllpOutbound(r.addr)
	o.TimeoutSeconds = 2
	s := newTestMLLPSender(t, o)
	for _, m := range []Outgoing{testMessageAsking("NE1", "NE", 0), testMessageAsking("AL1", "AL", 0), testMessageAsking("NE2", "NE", 0)} {
		if err := s.Send(t.Context(), m); err != nil {
			t.Fatalf("%s: %v", m.ControlID, err)
		}
	}
	waitFor(t, "NE2's ACK to be read", func() bool {
		c := <-s.slots
		defer func() { s.slots <- c }()
		return c != nil && (c.unawaited.empty() || len(c.replies) > 0)
	})
	if err := s.Send(t.Context(), testMessageAsking("AL2", "AL", 0)); err != nil {
		t.Fatalf("AL2: %v", err)
	}
	accepted, _, received := r.stats()
	if got := strings.Join(received, ","); got != "NE1,AL1,NE2,AL2" || accepted != 1 {
		t.Errorf("the receiver got %s over %d connections; want NE1,AL1,NE2,AL2 once each, over 1", got, accepted)
	}
}

// An ER message is delivered once written; a receiver that then refuses it
// (AR) refuses a message counted delivered, which nothing will send again:
// that is logged at WARN, with its queue id and control id but neither the
// message nor the receiver's text (which may quote it), and counted.
func TestMLLPSenderLogsARefusalOfAMessageItDidNotWaitFor(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, func(m *hl7.Message) answer {
		if m.ControlID() == "ER1" {
			return answer{code: hl7.AR, reason: "unknown patient " + secret}
		}
		return answer{}
	})
	o := mllpOutbound(r.addr)
	o.Name = "lab-refused-after" // its own counter
	s := newTestMLLPSender(t, o)
	logs := &logbuf.Buffer{}
	s.setLog(zerolog.New(logs))
	refused := metrics.GetOrCreateCounter(`mf_deliveries_refused_after_total{destination="lab-refused-after"}`)
	before := refused.Get() // -count runs the test again

	if err := s.Send(t.Context(), testMessageAsking("ER1", "ER", 0)); err != nil {
		t.Fatalf("ER1: %v", err)
	}
	// The AR comes before AL1's ACK: read by then.
	if err := s.Send(t.Context(), testMessageAsking("AL1", "AL", 0)); err != nil {
		t.Fatalf("AL1, after ER1's refusal: %v", err)
	}
	line := logs.String()
	if !strings.Contains(line, `"level":"warn"`) {
		t.Errorf("no WARN: %q", line)
	}
	for _, want := range []string{`"queue_id":42`, `"control_id":"ER1"`, `"ack_code":"AR"`, `"accept_ack_type":"ER"`, "refused a message already counted delivered"} {
		if !strings.Contains(line, want) {
			t.Errorf("the log %q does not say %s", line, want)
		}
	}
	if strings.Contains(line, "SECRET") || strings.Contains(line, "123456") {
		t.Errorf("the log quotes the message: %s", line)
	}
	if n := refused.Get() - before; n != 1 {
		t.Errorf("mf_deliveries_refused_after_total = %d, want 1", n)
	}
	if accepted, _, _ := r.stats(); accepted != 1 {
		t.Errorf("%d connections, want 1", accepted)
	}
}

// A receiver that cannot read a message cannot name it: its AR has MSA-2
// empty. Coming for a message sent without waiting (here while the
// connection is idle), it was dropped without a word, the message counted
// delivered and lost; it is now said, counted, and the next message goes
// on a new connection as before.
func TestMLLPSenderLogsAnUnnamedRefusalOnAConnectionThatCarriedUnawaitedSends(t *testing.T) {
	t.Parallel()
	empty := ""
	r := startReceiver(t, nil, func(m *hl7.Message) answer {
		if m.ControlID() == "ER1" {
			return answer{code: hl7.AR, controlID: &empty}
		}
		return answer{}
	})
	o := mllpOutbound(r.addr)
	o.Name = "lab-refused-unnamed" // its own counter
	s := newTestMLLPSender(t, o)
	logs := &logbuf.Buffer{}
	s.setLog(zerolog.New(logs))
	refused := metrics.GetOrCreateCounter(`mf_deliveries_refused_after_total{destination="lab-refused-unnamed"}`)
	before := refused.Get()
	if err := s.Send(t.Context(), testMessageAsking("ER1", "ER", 0)); err != nil {
		t.Fatalf("ER1: %v", err)
	}
	// The AR reaches the connection before AL1 is written (it is dropped
	// then, AL1 going on a new connection) or after (AL1 is sent again on a
	// new one): either way it is said once, and AL1 is delivered.
	if err := s.Send(t.Context(), testMessageAsking("AL1", "AL", 0)); err != nil {
		if err := s.Send(t.Context(), testMessageAsking("AL1", "AL", 0)); err != nil {
			t.Fatalf("AL1, sent again after the unnamed AR: %v", err)
		}
	}
	if !strings.Contains(logs.String(), `"level":"warn"`) || !strings.Contains(logs.String(), "could not name") {
		t.Errorf("no WARN about the unnamed refusal: %q", logs.String())
	}
	if n := refused.Get() - before; n != 1 {
		t.Errorf("mf_deliveries_refused_after_total = %d, want 1", n)
	}
}

// wantNotWritten fails the test unless err is a send that wrote nothing
// the receiver took (errNotWritten): the lane gives its row back with no
// attempt counted, and waits for the destination's dial backoff (RetryAfter).
func wantNotWritten(t *testing.T, err error) {
	t.Helper()
	var de *DeliveryError
	if !errors.Is(err, errNotWritten) || !errors.As(err, &de) || de.RetryAfter <= 0 {
		t.Errorf("%v: want a send that wrote nothing (errNotWritten), with the dial backoff's RetryAfter", err)
	}
}

// Nothing acknowledges an NE or ER message: a receiver that closes each new
// connection at once (at its connection limit), or refuses the client's
// certificate after a TLS 1.3 handshake the client has already finished,
// would take it unread, and it would count delivered. It is written only on
// a connection that stood a moment; else it fails, and is sent again, with
// no attempt counted (nothing reached the receiver) after the dial backoff.
// Counted, a receiver at its connection limit used up max_attempts and set
// messages aside that it had never seen.
func TestMLLPSenderWritesAnUnacknowledgedMessageOnlyOnAConnectionThatStands(t *testing.T) {
	t.Parallel()
	t.Run("closed at once", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		s := newTestMLLPSender(t, mllpOutbound(ln.Addr().String()))
		err = s.Send(t.Context(), testMessageAsking("NE1", "NE", 0))
		wantDeliveryError(t, err, false, "closed the new connection within ")
		wantDeliveryError(t, err, false, `before control id "NE1" (queue id 42) was written; not sent`)
		wantNotWritten(t, err)
	})
	t.Run("TLS client certificate refused", func(t *testing.T) {
		pki := newTestPKI(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
		r := startReceiver(t, pki.serverTLS(), func(*hl7.Message) answer { return answer{enhanced: true} })
		o := mllpOutbound(r.addr)
		o.TLS, o.TLSCA = true, pki.caFile // no client certificate
		err := newTestMLLPSender(t, o).Send(t.Context(), testMessageAsking("NE1", "NE", 0))
		wantDeliveryError(t, err, false, "mllp lab:")
		wantNotWritten(t, err)
		o.TLSCert, o.TLSKey = pki.clientCert, pki.clientKey
		if err := newTestMLLPSender(t, o).Send(t.Context(), testMessageAsking("NE2", "NE", 0)); err != nil {
			t.Fatalf("with a client certificate: %v", err)
		}
		waitFor(t, "NE2 to arrive", func() bool { _, _, received := r.stats(); return len(received) > 0 })
		if _, _, received := r.stats(); strings.Join(received, ",") != "NE2" {
			t.Errorf("the receiver got %v, want NE2 alone", received)
		}
	})
}

// A message whose ACK could be taken for the answer to an NE message sent
// before on the connection (the same control id) goes on a new connection:
// on the old one, its ACK was taken for the NE message's, which a receiver
// that honours MSH-15 never sends, and it waited until its time ran out.
func TestMLLPSenderSendsAMessageTheAckOfAnEarlierCouldAnswerOnANewConnection(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, nil, func(*hl7.Message) answer { return answer{enhanced: true} })
	o := mllpOutbound(r.addr)
	o.TimeoutSeconds = 2
	s := newTestMLLPSender(t, o)
	if err := s.Send(t.Context(), testMessageAsking("SAME", "NE", 0)); err != nil {
		t.Fatalf("NE: %v", err)
	}
	if err := s.Send(t.Context(), testMessageAsking("SAME", "AL", 0)); err != nil {
		t.Fatalf("AL with the NE message's control id: %v", err)
	}
	// The AL message's ACK says it arrived; the NE message, sent without
	// waiting, may still be in its connection's buffer.
	waitFor(t, "both messages to arrive", func() bool { _, _, received := r.stats(); return len(received) >= 2 })
	if accepted, _, received := r.stats(); accepted != 2 || len(received) != 2 {
		t.Errorf("the receiver got %v over %d connections; want 2 messages over 2", received, accepted)
	}
}

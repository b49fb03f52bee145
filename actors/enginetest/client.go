package enginetest

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/hl7"
)

// Client is an MLLP sender under a test's control.
type Client struct {
	t  testing.TB
	c  net.Conn
	fr *hl7.FrameReader
}

// Dial connects to an MLLP listener; the connection closes when the test ends.
func Dial(t testing.TB, addr string) *Client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return Wrap(t, c)
}

// Wrap makes a Client of an open connection (a TLS one, say).
func Wrap(t testing.TB, c net.Conn) *Client {
	t.Cleanup(func() { c.Close() })
	return &Client{t: t, c: c, fr: hl7.NewFrameReader(c, 1<<20)}
}

// Raw writes b as it is and reads one ACK frame.
func (cl *Client) Raw(b []byte) (hl7.Acknowledgment, error) {
	cl.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := cl.c.Write(b); err != nil {
		return hl7.Acknowledgment{}, err
	}
	f, err := cl.fr.ReadFrame()
	if err != nil {
		return hl7.Acknowledgment{}, err
	}
	return hl7.ParseAck(f)
}

// TrySend frames payload, sends it and returns its ACK or the error.
func (cl *Client) TrySend(payload []byte) (hl7.Acknowledgment, error) {
	frame, err := hl7.AppendFrame(nil, payload)
	if err != nil {
		return hl7.Acknowledgment{}, err
	}
	return cl.Raw(frame)
}

// Send is TrySend that fails the test on an error.
func (cl *Client) Send(payload string) hl7.Acknowledgment {
	cl.t.Helper()
	ack, err := cl.TrySend([]byte(payload))
	if err != nil {
		cl.t.Fatalf("send: %v", err)
	}
	return ack
}

// Post frames payload and sends it without reading an answer (a sender
// that asked for no ACK).
func (cl *Client) Post(payload string) {
	cl.t.Helper()
	frame, err := hl7.AppendFrame(nil, []byte(payload))
	if err == nil {
		cl.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		_, err = cl.c.Write(frame)
	}
	if err != nil {
		cl.t.Fatalf("post: %v", err)
	}
}

// ReadAck reads one ACK frame, waiting at most within for it.
func (cl *Client) ReadAck(within time.Duration) (hl7.Acknowledgment, error) {
	cl.c.SetReadDeadline(time.Now().Add(within))
	f, err := cl.fr.ReadFrame()
	if err != nil {
		return hl7.Acknowledgment{}, err
	}
	return hl7.ParseAck(f)
}

// Closed reports whether the other side has closed the connection.
func (cl *Client) Closed() bool {
	cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := cl.c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		(err != nil && strings.Contains(err.Error(), "connection reset"))
}

// ADT returns an ADT^A01 with control id id and PID-3.1 patient.
func ADT(id, patient string) string {
	return "MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01^ADT_A01|" + id + "|P|2.5.1\r" +
		"EVN|A01|20261121090000\r" +
		"PID|1||" + patient + "^^^HOSP^MR||DOE^JANE||19800101|F\r"
}

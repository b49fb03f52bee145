package listeners_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
)

func hostileConfig(listen, extra string) string {
	return `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "` + listen + `"
` + extra + `

[[outbound]]
name = "out"
type = "file"
directory = "{{dir}}/out"

[[route]]
from = "adt_in"
to = ["out"]
lane_key = "PID-3.1"
`
}

// 1,000 connections that send nothing and 50 that stall mid-frame: a
// well-behaved sender on the same listener still gets every ACK within 1 s,
// and each stalled connection is closed at its frame deadline.
func TestIdleAndStalledConnectionsDoNotHurtAGoodSender(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	const readTimeout = time.Second
	enginetest.Start(t, hostileConfig(addr, "max_connections = 2000\nread_timeout_seconds = 1\nidle_timeout_seconds = 120"))

	var idle []net.Conn
	for i := 0; i < 1000; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		idle = append(idle, c)
	}
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})

	type stall struct {
		c     net.Conn
		start time.Time
	}
	var stalls []stall
	for i := 0; i < 50; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		half := "\x0bMSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121||ADT^A01|STALL|P|2.5.1\rPID|1||"
		if _, err := c.Write([]byte(half)); err != nil {
			t.Fatal(err)
		}
		stalls = append(stalls, stall{c, time.Now()})
	}

	good := enginetest.Dial(t, addr)
	var worst time.Duration
	for i := 0; i < 20; i++ {
		start := time.Now()
		ack := good.Send(adt(fmt.Sprintf("GOOD%02d", i), "P1"))
		took := time.Since(start)
		if ack.Code != hl7.AA {
			t.Fatalf("good sender message %d: %s", i, ack.Code)
		}
		if took > time.Second {
			t.Fatalf("good sender message %d acknowledged after %v: more than 1 s", i, took)
		}
		worst = max(worst, took)
	}

	var wg sync.WaitGroup
	closedAfter := make([]time.Duration, len(stalls))
	for i, s := range stalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := s.c.Read(make([]byte, 1)); err != nil {
				closedAfter[i] = time.Since(s.start)
			}
		}()
	}
	wg.Wait()
	var latest time.Duration
	for i, d := range closedAfter {
		if d == 0 || d > readTimeout+time.Second || d < readTimeout-200*time.Millisecond {
			t.Fatalf("stalled connection %d closed after %v; want at its %v frame deadline", i, d, readTimeout)
		}
		latest = max(latest, d)
	}
	t.Logf("worst ACK of the good sender %v; the 50 stalled connections closed by %v (read_timeout %v); 1,000 idle ones open",
		worst.Round(time.Millisecond), latest.Round(time.Millisecond), readTimeout)
}

// 10,000 load-balancer health checks (connect, then close) produce no log
// line per probe and no error, and the listener keeps serving. The probes
// come in a tight loop, far faster than a load balancer's every 100 ms, so
// the connection limit is raised out of the way (TestConnectionLimit covers
// it).
func TestHealthCheckProbesAreSilent(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, hostileConfig(addr, "max_connections = 1000"))
	before := strings.Count(e.Logs.String(), "\n")
	for i := 0; i < 10000; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		c.Close()
	}
	if ack := enginetest.Dial(t, addr).Send(adt("AFTER", "P1")); ack.Code != hl7.AA {
		t.Fatalf("after the probes: %s", ack.Code)
	}
	logs := e.Logs.String()
	during := strings.Count(logs, "\n") - before
	if during > 5 {
		t.Fatalf("%d log lines for 10,000 probes and one message:\n%s", during, lastLines(logs, 10))
	}
	for _, line := range strings.Split(logs, "\n") {
		var rec struct{ Level string }
		if json.Unmarshal([]byte(line), &rec) == nil && (rec.Level == "warn" || rec.Level == "error") {
			t.Fatalf("a %s line: %s", rec.Level, line)
		}
	}
	t.Logf("10,000 probes: %d log lines at any level", during)
}

func TestLogsCarryNoPatientData(t *testing.T) {
	logs := phiScenario(t, false)
	for _, secret := range phiSecrets {
		if strings.Contains(logs, secret) {
			t.Fatalf("the logs carry %q:\n%s", secret, grep(logs, secret))
		}
	}
	t.Logf("%d log lines scanned, no patient data", strings.Count(logs, "\n"))
}

// log_payloads = true is the one switch that lets message content into the
// logs: the rejected message's bytes and the destination's own words. This
// is also the scan's positive control: the same scenario does leak then.
func TestLogPayloadsLetsContentIntoLogs(t *testing.T) {
	logs := phiScenario(t, true)
	if !strings.Contains(grep(logs, "message is not HL7 v2"), phiMRN) {
		t.Fatalf("with log_payloads, the rejected message's line lacks its payload:\n%s", grep(logs, "not HL7"))
	}
	if !strings.Contains(grep(logs, "receiver rejected"), "unknown patient "+phiMRN) {
		t.Fatalf("with log_payloads, the refusal lacks the destination's words:\n%s", grep(logs, "receiver rejected"))
	}
	// The HTTP destination's reason phrase too: else the scan above could
	// not tell whether the words of an HTTP refusal are kept out.
	if !strings.Contains(grep(logs, "http emr"), httpRefusal) {
		t.Fatalf("with log_payloads, the HTTP refusal lacks the destination's reason phrase %q:\n%s", httpRefusal, grep(logs, "http emr"))
	}
}

const phiMRN = "SECRETMRN4711"

// httpRefusal is the HTTP destination's own words: its status line's reason
// phrase quotes the patient field it refused (enginetest.HTTPDestination).
// "POISON" alone is no secret here: it is in a control id, which logs carry.
const httpRefusal = "Unknown patient " + enginetest.RejectedPatient

// phiSecrets are the patient's field values the scenario sends, and the
// destinations' words that quote them.
var phiSecrets = []string{phiMRN, "SECRETNAME", "GRETA", "19800101", httpRefusal}

// phiScenario drives every path that logs about a message: accepted and
// delivered, refused by an HTTP destination and by an MLLP destination that
// echoes the patient id in its ACK (both dead-lettered), not HL7, bad
// separators, not stored (AE) and oversize. It returns the captured logs.
func phiScenario(t *testing.T, logPayloads bool) string {
	addr := enginetest.FreeAddr(t)
	dest := enginetest.StartHTTPDestination(t)
	echo := startEchoingRejecter(t, "unknown patient "+phiMRN)
	e := enginetest.Start(t, fmt.Sprintf("log_payloads = %v\n", logPayloads)+`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "`+addr+`"
max_message_bytes = 1024

[[outbound]]
name = "emr"
type = "http"
url = "`+dest.URL+`"
max_attempts = 2
on_exhausted = "dead"
retry_base_seconds = 0.05
retry_max_seconds = 0.1

[[outbound]]
name = "lab"
type = "mllp"
address = "`+echo+`"
on_exhausted = "dead"

[[route]]
from = "adt_in"
to = ["emr", "lab"]
lane_key = "PID-3.1"
`)
	pid := "PID|1||" + phiMRN + "^^^HOSP^MR||SECRETNAME^GRETA||19800101|F\r"
	msh := "MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01|%s|P|2.5.1\r"
	cl := enginetest.Dial(t, addr)
	cl.Send(fmt.Sprintf(msh, "OK1") + pid)                         // accepted; delivered to emr, refused by lab
	cl.Send(fmt.Sprintf(msh, "POISON1") + pid + "NTE|1||POISON\r") // refused by both destinations, dead
	cl.Send(pid)                                                   // not HL7: rejected
	cl.Send(strings.Replace(fmt.Sprintf(msh, "BAD"), "|^~\\&|", "|^|", 1) + pid)
	e.Store.FailIngest.Store(true)
	cl.Send(fmt.Sprintf(msh, "AE1") + pid) // not stored: AE
	e.Store.FailIngest.Store(false)
	big := enginetest.Dial(t, addr)
	big.TrySend([]byte(fmt.Sprintf(msh, "BIG") + pid + strings.Repeat("NTE|1||"+phiMRN+"\r", 60)))
	enginetest.WaitFor(t, "the refused messages to be set aside", 10*time.Second, func() bool {
		return strings.Count(e.Logs.String(), "set aside as dead") >= 3 // POISON1 at emr, OK1 and POISON1 at lab
	})
	return e.Logs.String()
}

// startEchoingRejecter is an MLLP destination that answers every message AR
// with text, as receivers do that quote the field they choke on.
func startEchoingRejecter(t *testing.T, text string) string {
	return enginetest.ServeTCP(t, func(c net.Conn) {
		fr := hl7.NewFrameReader(c, 1<<20)
		for {
			b, err := fr.ReadFrame()
			if err != nil {
				return
			}
			m, err := hl7.Parse(b)
			if err != nil || hl7.WriteFrame(c, hl7.Ack(m, hl7.AR, text)) != nil {
				return
			}
		}
	})
}

// Connections beyond max_connections are closed at once and counted, and
// the refusals are logged once per interval, not once per connection.
func TestConnectionLimit(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, hostileConfig(addr, "max_connections = 10"))
	refused0 := refusedCount()
	var held []*enginetest.Client
	for i := 0; i < 10; i++ {
		held = append(held, enginetest.Dial(t, addr))
	}
	if ack := held[0].Send(adt("IN1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("a connection within the limit: %s", ack.Code)
	}
	for i := 0; i < 20; i++ {
		if !enginetest.Dial(t, addr).Closed() {
			t.Fatalf("connection %d beyond the limit was not closed at once", 11+i)
		}
	}
	if n := refusedCount() - refused0; n != 20 {
		t.Fatalf("mf_connections_refused_total grew by %v for 20 refused connections", n)
	}
	if n := strings.Count(e.Logs.String(), "connections refused"); n != 1 {
		t.Fatalf("%d log lines for 20 refused connections; want 1 per interval", n)
	}
	if ack := held[9].Send(adt("IN2", "P1")); ack.Code != hl7.AA {
		t.Fatalf("a held connection after the refusals: %s", ack.Code)
	}
}

// refusedCount reads mf_connections_refused_total{inbound="adt_in"}.
func refusedCount() float64 { return metricValue(`mf_connections_refused_total{inbound="adt_in"}`) }

// metricValue reads the process's series (name and labels, as exported),
// 0 when it is not there.
func metricValue(series string) float64 {
	var buf bytes.Buffer
	metrics.WritePrometheus(&buf, false)
	for _, line := range strings.Split(buf.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

func grep(s, word string) string {
	var b bytes.Buffer
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, word) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// A sender still writing a frame the listener has refused (too large, or not
// MLLP at all) gets the AR that says why, then the close: the listener reads
// and drops the rest of what it sends instead of closing on unread bytes,
// which the kernel answers with a reset that loses the AR (the sender sees
// "connection reset by peer" on its write). 32 MiB is more than loopback's
// socket buffers hold, so the sender is mid-write when the AR is sent.
func TestARefusedFrameIsAnsweredNotReset(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, hostileConfig(addr, "max_message_bytes = 1024"))
	huge := strings.Repeat("x", 32<<20)

	big, _ := hl7.AppendFrame(nil, []byte(adt("BIG", "P1")+"OBX|1|ED|PDF^Report||"+huge+"\r"))
	cl := enginetest.Dial(t, addr)
	ack, err := cl.Raw(big)
	if err != nil || ack.Code != hl7.AR || !strings.Contains(ack.Text, "larger than 1024 bytes") {
		t.Fatalf("oversize frame: %+v, %v; want the AR saying it is larger than 1024 bytes", ack, err)
	}
	if !cl.Closed() {
		t.Fatal("connection still open after an oversize frame")
	}

	cl = enginetest.Dial(t, addr)
	ack, err = cl.Raw([]byte("MSH|^~\\&|" + huge + "\r"))
	if err != nil || ack.Code != hl7.AR || !strings.Contains(ack.Text, "not MLLP framed") {
		t.Fatalf("unframed bytes: %+v, %v; want the AR saying they are not MLLP framed", ack, err)
	}
	if !cl.Closed() {
		t.Fatal("connection still open after unframed bytes")
	}

	if ack := enginetest.Dial(t, addr).Send(adt("OK1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("a good sender afterwards: %s", ack.Code)
	}
}

// A sender that ends its frame with the end block alone (0x1C, no CR) and
// waits for the answer is told why at the frame deadline, with an AR, and the
// operator finds a line about it: before, the listener waited for the CR
// until read_timeout and closed the connection without a word to either, and
// the sender resent the message, to the same end, forever. A frame that
// stops midway is logged too.
func TestAFrameEndedWithoutCRIsAnsweredAtTheFrameDeadline(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, hostileConfig(addr, "read_timeout_seconds = 0.5"))
	cl := enginetest.Dial(t, addr)
	ack, err := cl.Raw([]byte("\x0b" + adt("NOCR", "P1") + "\x1c"))
	if err != nil || ack.Code != hl7.AR || !strings.Contains(ack.Text, "0x0D") {
		t.Fatalf("got %+v, %v; want an AR saying the end block was not followed by CR (0x0D)", ack, err)
	}
	if !cl.Closed() {
		t.Fatal("connection still open after the frame deadline")
	}
	if !strings.Contains(grep(e.Logs.String(), `"level":"warn"`), "not followed by CR") {
		t.Fatalf("no warning about the missing CR:\n%s", lastLines(e.Logs.String(), 5))
	}

	// A frame that stops before its end block has nothing to answer, but the
	// operator is told of it.
	cl = enginetest.Dial(t, addr)
	if _, err := cl.Raw([]byte("\x0b" + adt("STALL", "P1"))); err == nil {
		t.Fatal("got an answer to a frame that never ended")
	}
	if !strings.Contains(grep(e.Logs.String(), `"level":"warn"`), "began but did not end") {
		t.Fatalf("no warning about the frame that did not end:\n%s", lastLines(e.Logs.String(), 5))
	}
	if ack := enginetest.Dial(t, addr).Send(adt("OK1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("a good sender afterwards: %s", ack.Code)
	}
}

// A sender that ends its frame with 0x1C alone and closes its side (a
// half-close: it still reads) is answered as at the frame deadline, AR, at
// once; one that closes its side in the middle of a frame gets nothing,
// but the operator is told. Both were taken for a sender that had gone,
// silently, at DEBUG.
func TestASenderThatClosesItsSideMidFrameIsToldOrLogged(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, hostileConfig(addr, "read_timeout_seconds = 30"))
	halfClose := func(stream string) []byte {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(stream)); err != nil {
			t.Fatal(err)
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		// Well within read_timeout: an answer comes at the half-close, not
		// at the deadline.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("reading the answer: %v (the listener did not close the connection)", err)
		}
		return b
	}
	b := halfClose("\x0b" + adt("HALF1", "P1") + "\x1c")
	ack, err := hl7.ParseAck(bytes.Trim(b, "\x0b\x1c\r"))
	if err != nil || ack.Code != hl7.AR || !strings.Contains(ack.Text, "0x0D") {
		t.Fatalf("answer %q (%v); want an AR saying the end block was not followed by CR (0x0D)", b, err)
	}
	if !strings.Contains(grep(e.Logs.String(), `"level":"warn"`), "before the sender closed its side") {
		t.Fatalf("no warning about the missing CR:\n%s", lastLines(e.Logs.String(), 5))
	}
	if b := halfClose("\x0b" + adt("HALF2", "P1")[:40]); len(b) != 0 {
		t.Fatalf("answer %q to a frame cut off by the sender; want none", b)
	}
	if !strings.Contains(grep(e.Logs.String(), `"level":"warn"`), "closed its side before it ended") {
		t.Fatalf("no warning about the frame cut off:\n%s", lastLines(e.Logs.String(), 5))
	}
}

// Each way a stream breaks MLLP framing is answered with its own reason, and
// logged with it: before, every one was answered "not an MLLP frame: expected
// 0x0B" and logged as "bytes outside an MLLP frame", so a sender that ends
// its frames with 0x1C LF, or starts a frame before ending the last, was told
// (and its operator read) that it was not speaking MLLP at all.
func TestEachFramingErrorIsAnsweredWithItsReason(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, hostileConfig(addr, ""))
	for _, tc := range []struct{ name, stream, want string }{
		{"end block then LF", "\x0b" + adt("LF", "P1") + "\x1c\n", "end block (0x1C) followed by 0x0a, not CR (0x0D)"},
		{"start block inside a frame", "\x0b" + adt("TWICE", "P1") + "\x0b" + adt("TWICE", "P1") + "\x1c\r", "start block (0x0B) inside a frame"},
		{"no start block", adt("BARE", "P1") + "\x1c\r", "byte 0x4d where a start block (0x0B) was expected"},
	} {
		cl := enginetest.Dial(t, addr)
		ack, err := cl.Raw([]byte(tc.stream))
		if err != nil || ack.Code != hl7.AR || !strings.Contains(ack.Text+ack.ErrorMessage, tc.want) {
			t.Errorf("%s: got %+v, %v; want an AR saying %q", tc.name, ack, err, tc.want)
		}
		if !cl.Closed() {
			t.Errorf("%s: connection still open", tc.name)
		}
		if !strings.Contains(grep(e.Logs.String(), `"level":"warn"`), tc.want) {
			t.Errorf("%s: no warning saying %q:\n%s", tc.name, tc.want, lastLines(e.Logs.String(), 3))
		}
	}
}

// A sender that reconnects and breaks framing the same way each time is
// answered each time, but logged once a minute: each connection used to be
// a WARN line of its own, and a partner set up wrong, reconnecting every few
// seconds, drowned the log's other lines. The line after the first says how
// many went unlogged.
func TestASenderThatKeepsBreakingFramingIsLoggedOnce(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, hostileConfig(addr, ""))
	for i := range 3 {
		cl := enginetest.Dial(t, addr)
		ack, err := cl.Raw([]byte(adt("BARE", "P1") + "\x1c\r"))
		if err != nil || ack.Code != hl7.AR || !strings.Contains(ack.Text+ack.ErrorMessage, "start block (0x0B) was expected") {
			t.Fatalf("connection %d: got %+v, %v; want the AR saying why", i, ack, err)
		}
	}
	warned := grep(e.Logs.String(), "broke MLLP framing")
	if n := strings.Count(warned, "\n"); n != 1 {
		t.Fatalf("3 connections that broke framing the same way logged %d lines; want 1:\n%s", n, warned)
	}
	if ack := enginetest.Dial(t, addr).Send(adt("OK1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("a good sender afterwards: %s", ack.Code)
	}
}

// A message with a UTF-8 byte order mark before its MSH (a Windows
// program's text) is stored without it and answered AA, as a file inbound
// reads such a file: it was answered AR, "first segment is not MSH".
func TestAByteOrderMarkBeforeMSHIsDropped(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, hostileConfig(addr, ""))
	frame, _ := hl7.AppendFrame(nil, []byte("\xEF\xBB\xBF"+adt("BOM1", "P1")))
	ack, err := enginetest.Dial(t, addr).Raw(frame)
	if err != nil || ack.Code != hl7.AA || ack.ControlID != "BOM1" {
		t.Fatalf("got %+v, %v; want AA for BOM1", ack, err)
	}
	msgs := e.Messages(t)
	if len(msgs) != 1 || !bytes.HasPrefix(msgs[0].Message.Payload, []byte("MSH|")) {
		t.Fatalf("stored %+v; want one message that starts with MSH", msgs)
	}
}

// A frame that began and did not end within read_timeout (a sender that
// stalls, or a slow-loris holding connections one byte at a time) is
// counted, as every other message not taken is: 90 such connections, each
// cut off at read_timeout, left one WARN line (logged once a minute per
// host) and no metric at all.
func TestAFrameThatDoesNotEndIsCounted(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, hostileConfig(addr, "read_timeout_seconds = 0.5"))
	const series = `mf_messages_rejected_total{inbound="adt_in",reason="incomplete"}`
	before := counterValue(t, series)
	for i := 0; i < 3; i++ {
		cl := enginetest.Dial(t, addr)
		if _, err := cl.Raw([]byte("\x0b" + adt("STALL", "P1"))); err == nil {
			t.Fatal("got an answer to a frame that never ended")
		}
	}
	if got := counterValue(t, series) - before; got != 3 {
		t.Fatalf("%s rose by %v for 3 frames that did not end within read_timeout; want 3", series, got)
	}
}

// Between messages a sender may stay silent up to idle_timeout, however
// short read_timeout is (read_timeout bounds a frame once it has begun):
// a feed that sends every few seconds must keep its connection. Past
// idle_timeout the connection is closed.
func TestASilenceBetweenMessagesIsBoundByTheIdleTimeoutNotTheReadTimeout(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, hostileConfig(addr, "read_timeout_seconds = 0.3\nidle_timeout_seconds = 3"))
	cl := enginetest.Dial(t, addr)
	if ack := cl.Send(adt("IDLE1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("first message: %s", ack.Code)
	}
	time.Sleep(time.Second) // past read_timeout, within idle_timeout
	ack, err := cl.TrySend([]byte(adt("IDLE2", "P1")))
	if err != nil || ack.Code != hl7.AA {
		t.Fatalf("a message 1 s after the last one, with read_timeout 0.3 s and idle_timeout 3 s: %v %v; want AA on the same connection", ack.Code, err)
	}
	silent := time.Now()
	if _, err := cl.ReadAck(6 * time.Second); err == nil {
		t.Fatal("an ACK nobody asked for")
	}
	if took := time.Since(silent); took < 2500*time.Millisecond || took > 5*time.Second {
		t.Fatalf("a silent connection ended after %v; want it closed at idle_timeout (3 s)", took)
	}
}

// A sender that stops reading its ACKs blocks the listener's writes once
// the socket buffers are full; the write has read_timeout, after which the
// connection is closed. Without that bound, such a sender would hold its
// connection (one of max_connections) and its goroutine for as long as it
// stays connected.
func TestASenderThatReadsNoACKIsClosedAtTheReadTimeout(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, hostileConfig(addr, "read_timeout_seconds = 0.5"))
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(16 << 10)
	// Each ACK copies MSH-3 (as its MSH-5): 400 KB ACKs, 12 MB in all,
	// more than the two sockets' buffers hold.
	big := strings.Replace(adt("BIG", "P1"), "|EPIC|", "|"+strings.Repeat("E", 400<<10)+"|", 1)
	frame, err := hl7.AppendFrame(nil, []byte(big))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := 0; i < 30; i++ {
			c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			if _, err := c.Write(frame); err != nil {
				return
			}
		}
	}()
	// The listener's ACK write blocks, and times out. Waited for, not
	// slept: a sleep of 3 s, on a loaded machine, could end before the
	// buffers filled (each ACK waits for its 400 KB message's commit), and
	// the read below then drained them, so that no write ever waited.
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(e.Logs.String(), "writing the ACK failed"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no ACK write failed 60 s after a sender that reads no ACK sent 12 MB of messages; want one to time out after read_timeout (0.5 s):\n%s", e.Logs.String())
		}
	}
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection of a sender that read no ACK was still open %v after its ACK write failed; want it closed once an ACK write waited read_timeout (0.5 s)", time.Since(start))
	}
}

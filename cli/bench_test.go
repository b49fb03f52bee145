package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
)

// testDeadline bounds every wait of these tests; nothing here should take
// more than a fraction of it.
const testDeadline = 60 * time.Second

// testSink is a sink running in the test, on a free loopback port.
type testSink struct {
	addr   string
	cancel context.CancelFunc
	done   chan sinkReport
}

func startSink(t *testing.T, expect int64) *testSink {
	t.Helper()
	s, err := listenSink("127.0.0.1:0", expect)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testSink{addr: s.Addr().String(), cancel: cancel, done: make(chan sinkReport, 1)}
	go func() { ts.done <- s.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ts.done:
		case <-time.After(testDeadline):
			t.Error("sink did not stop")
		}
	})
	return ts
}

// report waits for the sink to stop by itself (--expect reached).
func (ts *testSink) report(t *testing.T) sinkReport {
	t.Helper()
	select {
	case r := <-ts.done:
		ts.done <- r // for the cleanup
		return r
	case <-time.After(testDeadline):
		t.Fatal("sink did not reach its expected count")
		return sinkReport{}
	}
}

// stop stops the sink and returns its report.
func (ts *testSink) stop(t *testing.T) sinkReport {
	t.Helper()
	ts.cancel()
	return ts.report(t)
}

// bench runs runBench against addr, failing the test if it does not end.
func bench(t *testing.T, o benchOptions) (*benchReport, error) {
	t.Helper()
	type result struct {
		rep *benchReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := runBench(context.Background(), o)
		done <- result{rep, err}
	}()
	select {
	case r := <-done:
		if r.rep == nil {
			t.Fatalf("bench did not run: %v", r.err)
		}
		return r.rep, r.err
	case <-time.After(testDeadline):
		t.Fatal("bench did not end")
		return nil, nil
	}
}

func TestBenchEveryMessageArrivesOnceInOrder(t *testing.T) {
	t.Parallel()
	sink := startSink(t, 2000)
	rep, err := bench(t, benchOptions{Target: sink.addr, Connections: 4, Lanes: 8, Count: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.failure(); err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 2000 || rep.Accepted != 2000 || rep.Rejected != 0 || rep.Errors != 0 {
		t.Fatalf("bench: sent %d accepted %d rejected %d errors %d, want 2000 2000 0 0", rep.Sent, rep.Accepted, rep.Rejected, rep.Errors)
	}
	if rep.Latency.P50 <= 0 || rep.Latency.P50 > rep.Latency.P99 || rep.Latency.P99 > rep.Latency.Max {
		t.Errorf("latency percentiles out of order: %+v", rep.Latency)
	}
	got := sink.report(t)
	want := sinkReport{Received: 2000, Unique: 2000, Lanes: 8}
	if got.Received != want.Received || got.Unique != want.Unique || got.Duplicates != 0 ||
		got.Reordered != 0 || got.Unchecked != 0 || got.Malformed != 0 || got.Lanes != want.Lanes {
		t.Fatalf("sink: %+v, want %+v", got, want)
	}
	if err := got.failure(); err != nil {
		t.Fatal(err)
	}
}

func TestBenchDurationStops(t *testing.T) {
	t.Parallel()
	sink := startSink(t, 0)
	rep, err := bench(t, benchOptions{Target: sink.addr, Connections: 2, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.failure(); err != nil {
		t.Fatal(err)
	}
	if rep.Sent == 0 || rep.Accepted != rep.Sent {
		t.Fatalf("sent %d, accepted %d: want all of at least one accepted", rep.Sent, rep.Accepted)
	}
	got := sink.stop(t)
	if got.Unique != rep.Sent || got.Duplicates != 0 || got.Reordered != 0 || got.Lanes != 2 {
		t.Fatalf("sink: %+v after %d sent", got, rep.Sent)
	}
}

func TestBenchRateLimitsTheSchedule(t *testing.T) {
	t.Parallel()
	sink := startSink(t, 0)
	// Open loop: message i of a connection is due at a fixed time and never
	// sent before it, so within the duration at most rate*duration (plus
	// one per connection for rounding) can go; closed loop would send
	// thousands.
	const rate, conns = 100.0, 2
	d := 500 * time.Millisecond
	rep, err := bench(t, benchOptions{Target: sink.addr, Connections: conns, Lanes: 4, Duration: d, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.failure(); err != nil {
		t.Fatal(err)
	}
	if bound := int64(rate*d.Seconds()) + conns; rep.Sent < 1 || rep.Sent > bound {
		t.Fatalf("sent %d at %v msg/s for %s: want 1 to %d", rep.Sent, rate, d, bound)
	}
	first := rep.Sent

	// With a count, the schedule sends exactly the count.
	rep, err = bench(t, benchOptions{Target: sink.addr, Connections: conns, Lanes: 4, Count: 50, Rate: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.failure(); err != nil || rep.Accepted != 50 {
		t.Fatalf("accepted %d of 50: %v", rep.Accepted, err)
	}
	// Each run has its own run id: the sink counts its lanes apart.
	got := sink.stop(t)
	if got.Unique != first+50 || got.Duplicates != 0 || got.Reordered != 0 || got.Lanes != 8 {
		t.Fatalf("sink: %+v, want %d unique on 8 lanes", got, first+50)
	}
}

// An open-loop run reports at most its rate: its n messages take n
// intervals of the schedule. It counted n-1 (the first is due at the
// start): 10 messages at 10/s read 11 msg/s.
func TestBenchOpenLoopThroughputIsAtMostItsRate(t *testing.T) {
	t.Parallel()
	sink := startSink(t, 0)
	const rate = 10.0
	rep, err := bench(t, benchOptions{Target: sink.addr, Connections: 1, Lanes: 1, Count: 10, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.failure(); err != nil || rep.Accepted != 10 {
		t.Fatalf("accepted %d of 10: %v", rep.Accepted, err)
	}
	if rep.ThroughputPerSecond > rate {
		t.Fatalf("10 messages at %v msg/s: %.2f msg/s in %.2f s; want at most %v", rate, rep.ThroughputPerSecond, rep.ElapsedSeconds, rate)
	}
}

// sinkMessage is a message as mf bench sends it, with run, lane and seq.
func sinkMessage(run, lane string, seq int) string {
	s := strconv.Itoa(seq)
	return enginetest.ADT(run+"-"+lane+"-"+s, lane) + "PV1|1|I|||||||||||||||||" + s + "^^^" + run + "^VN\r"
}

func TestSinkReportsDuplicatesAndReordered(t *testing.T) {
	t.Parallel()
	sink := startSink(t, 0)
	cl := enginetest.Dial(t, sink.addr)
	for _, seq := range []int{1, 3, 2, 3, 4} { // 2 is reordered, the second 3 a duplicate
		if ack := cl.Send(sinkMessage("R1", "L0001", seq)); ack.Code != hl7.AA {
			t.Fatalf("seq %d: ACK %s, want AA", seq, ack.Code)
		}
	}
	// The same lane in another run is another lane; a message without a
	// sequence number is acknowledged and not checked.
	cl.Send(sinkMessage("R2", "L0001", 1))
	if ack := cl.Send(enginetest.ADT("X1", "L0001")); ack.Code != hl7.AA {
		t.Fatalf("unchecked message: ACK %s, want AA", ack.Code)
	}

	got := sink.stop(t)
	want := sinkReport{Received: 7, Unique: 5, Duplicates: 1, Reordered: 1, Unchecked: 1, Lanes: 2}
	got.Listen, got.ElapsedSeconds, got.RatePerSecond, got.LastArrivalUnix = "", 0, 0, 0
	if got != want {
		t.Fatalf("sink: %+v, want %+v", got, want)
	}
	err := got.failure()
	if err == nil || !strings.Contains(err.Error(), "1 duplicates") || !strings.Contains(err.Error(), "1 reordered") {
		t.Fatalf("failure: %v, want duplicates and reordered named", err)
	}
}

// Past the bitmap (a lane beyond 16 million messages), where sequence
// numbers are kept in a map, arrivals are told apart as below it.
func TestSinkLaneTellsArrivalsApartPastTheBitmap(t *testing.T) {
	var l sinkLane
	for i, c := range []struct {
		seq  uint64
		want int
	}{
		{sinkDenseMax - 1, arrivalInOrder}, {sinkDenseMax + 2, arrivalInOrder}, {sinkDenseMax + 1, arrivalReordered},
		{sinkDenseMax + 2, arrivalDuplicate}, {sinkDenseMax + 1, arrivalDuplicate}, {sinkDenseMax - 1, arrivalDuplicate},
		{sinkDenseMax + 3, arrivalInOrder},
	} {
		if got := l.add(c.seq); got != c.want {
			t.Fatalf("arrival %d (seq %d): kind %d, want %d (in order %d, reordered %d, duplicate %d)",
				i, c.seq, got, c.want, arrivalInOrder, arrivalReordered, arrivalDuplicate)
		}
	}
}

func TestSinkNaksMalformedFrames(t *testing.T) {
	t.Parallel()
	sink := startSink(t, 0)

	// Not HL7, but framed: AR, and the connection goes on.
	cl := enginetest.Dial(t, sink.addr)
	ack, err := cl.TrySend([]byte("NOT HL7 AT ALL"))
	if err != nil || ack.Code != hl7.AR {
		t.Fatalf("unparsable message: ACK %q, %v; want AR", ack.Code, err)
	}
	if ack := cl.Send(sinkMessage("R1", "L0000", 1)); ack.Code != hl7.AA {
		t.Fatalf("message after a NAK: ACK %s, want AA", ack.Code)
	}

	// Not MLLP: AR, then the connection is closed.
	cl = enginetest.Dial(t, sink.addr)
	ack, err = cl.Raw([]byte("GET / HTTP/1.1\r\n\r\n"))
	if err != nil || ack.Code != hl7.AR {
		t.Fatalf("unframed bytes: ACK %q, %v; want AR", ack.Code, err)
	}
	if !cl.Closed() {
		t.Fatal("connection still open after a framing error")
	}

	got := sink.stop(t)
	if got.Malformed != 2 || got.Unique != 1 {
		t.Fatalf("sink: %+v, want 2 malformed and 1 unique", got)
	}
	if err := got.failure(); err == nil || !strings.Contains(err.Error(), "2 malformed") {
		t.Fatalf("failure: %v, want malformed named", err)
	}
}

func TestSinkTimesOutBeforeExpect(t *testing.T) {
	t.Parallel()
	s, err := listenSink("127.0.0.1:0", 10)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan sinkReport, 1)
	go func() { done <- s.run(ctx) }()
	enginetest.Dial(t, s.Addr().String()).Send(sinkMessage("R1", "L0000", 1))
	cancel() // what --timeout does
	select {
	case r := <-done:
		if err := r.failure(); err == nil || !strings.Contains(err.Error(), "1 of 10 expected") {
			t.Fatalf("failure: %v, want the expected count named", err)
		}
	case <-time.After(testDeadline):
		t.Fatal("sink did not stop")
	}
}

// ackServer is a receiver that answers every message with code (or with
// what answer returns, when set: nil closes the connection unanswered),
// over TLS if tls is set, calling received (when set) before each answer.
type ackServer struct {
	code     hl7.AckCode
	tls      *tls.Config
	received func()
	answer   func(payload []byte) []byte
}

// start serves on a free loopback port until the test ends and returns the
// address.
func (a ackServer) start(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if a.tls != nil {
		ln = tls.NewListener(ln, a.tls)
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				fr := hl7.NewFrameReader(nc, 0)
				for {
					p, err := fr.ReadFrame()
					if err != nil {
						return
					}
					if a.received != nil {
						a.received()
					}
					var reply []byte
					if a.answer != nil {
						if reply = a.answer(p); reply == nil {
							return
						}
					} else {
						m, _ := hl7.Parse(p)
						reply = hl7.Ack(m, a.code, "no thanks")
					}
					if hl7.WriteFrame(nc, reply) != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestBenchCountsRejections(t *testing.T) {
	t.Parallel()
	for _, code := range []hl7.AckCode{hl7.AR, hl7.AE} {
		rep, err := bench(t, benchOptions{Target: ackServer{code: code}.start(t), Connections: 2, Count: 20})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Sent != 20 || rep.Rejected != 20 || rep.Accepted != 0 || rep.Errors != 0 {
			t.Fatalf("%s: sent %d accepted %d rejected %d errors %d", code, rep.Sent, rep.Accepted, rep.Rejected, rep.Errors)
		}
		err = rep.failure()
		if err == nil || !strings.Contains(err.Error(), "20 of 20 messages not accepted") || !strings.Contains(err.Error(), "no thanks") {
			t.Fatalf("%s: failure %v, want the count and the receiver's reason", code, err)
		}
	}
}

func TestBenchOverTLS(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	pki := enginetest.NewPKI(t, t.TempDir())
	cert, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	addr := ackServer{code: hl7.AA, tls: &tls.Config{Certificates: []tls.Certificate{cert}}}.start(t)
	var out bytes.Buffer
	args := []string{"mf", "bench", "--target", addr, "--count", "20", "--connections", "2", "--tls", "--tls-ca", pki.CAFile}
	if err := App(&out, &out).Run(args); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "accepted 20,") {
		t.Fatalf("summary: %s", out.String())
	}
	// Without the CA the listener's certificate is not trusted: no run.
	err = App(&out, &out).Run([]string{"mf", "bench", "--target", addr, "--count", "1", "--tls"})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("error %v, want the certificate refused", err)
	}
}

func TestBenchStopsWhenInterrupted(t *testing.T) {
	t.Parallel()
	// The receiver interrupts the run (as SIGINT would) at its 10th message.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int64
	addr := ackServer{code: hl7.AA, received: func() {
		if n.Add(1) == 10 {
			cancel()
		}
	}}.start(t)
	done := make(chan *benchReport, 1)
	go func() {
		rep, _ := runBench(ctx, benchOptions{Target: addr, Connections: 2, Duration: time.Hour})
		done <- rep
	}()
	select {
	case rep := <-done:
		if rep == nil || !rep.interrupted || rep.Accepted < 1 || rep.Errors != 0 {
			t.Fatalf("report %+v: want interrupted, some accepted, no errors", rep)
		}
		if err := rep.failure(); err == nil || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("failure %v, want interrupted", err)
		}
	case <-time.After(testDeadline):
		t.Fatal("bench did not stop when interrupted")
	}
}

func TestBenchCountsErrorsWhenTheReceiverHangsUp(t *testing.T) {
	t.Parallel()
	// A receiver that reads one frame and closes: each message is an
	// error, and the worker dials again for the next.
	addr := enginetest.ServeTCP(t, func(nc net.Conn) { _, _ = hl7.NewFrameReader(nc, 0).ReadFrame() })
	rep, err := bench(t, benchOptions{Target: addr, Count: 5})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 5 || rep.Accepted != 0 {
		t.Fatalf("errors %d accepted %d, want 5 and 0 (%s)", rep.Errors, rep.Accepted, rep.FirstProblem)
	}
	if rep.failure() == nil {
		t.Fatal("no failure")
	}
}

func TestBenchFailsFastWhenTheTargetIsDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rep, err := runBench(context.Background(), benchOptions{Target: addr, Count: 1, Timeout: 5 * time.Second})
	if rep != nil || err == nil || !strings.Contains(err.Error(), "dial "+addr) {
		t.Fatalf("report %v, error %v; want no report and the dial error", rep, err)
	}
}

// --connections 0, --lanes 0 and --timeout 0 are refused, naming the flag:
// runBench takes a zero for its default, and they were run with 1,
// --connections and 30s.
func TestBenchRefusesZeroForFlagsWithADefault(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	// Nothing listens there: a flag taken would end in a dial error, not
	// in an error naming the flag.
	target := enginetest.FreeAddr(t)
	for _, tc := range []struct{ flag, value string }{
		{"--connections", "0"}, {"--lanes", "0"}, {"--lanes", "-1"}, {"--timeout", "0s"},
	} {
		var out bytes.Buffer
		err := App(&out, &out).Run([]string{"mf", "bench", "--target", target, "--count", "1", tc.flag, tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.flag+" "+tc.value) {
			t.Errorf("mf bench %s %s: error %v; want one naming %s %s", tc.flag, tc.value, err, tc.flag, tc.value)
		}
	}
}

func TestBenchJSON(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	sink := startSink(t, 300)
	var out, errOut bytes.Buffer
	err := App(&out, &errOut).Run([]string{"mf", "bench", "--target", sink.addr, "--connections", "3", "--count", "300", "--size", "2000", "--json"})
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, errOut.String())
	}
	// Exactly the keys mf bench --help and the README name.
	got := enginetest.JSONShape(t, "mf bench --json", out.Bytes(), map[string]string{
		"target": "string", "connections": "number", "lanes": "number", "size_bytes": "number", "rate": "number",
		"sent": "number", "accepted": "number", "rejected": "number", "errors": "number",
		"elapsed_seconds": "number", "throughput_per_second": "number", "latency_ms": "object",
		"sent_late": "number", "max_late_ms": "number", "started_unix": "number", "longest_gap_ms": "number",
	}, "first_problem")
	if got["accepted"] != 300.0 || got["connections"] != 3.0 || got["lanes"] != 3.0 {
		t.Errorf("accepted %v, connections %v, lanes %v; want 300, 3, 3", got["accepted"], got["connections"], got["lanes"])
	}
	if size := got["size_bytes"].(float64); math.Abs(size-2000) > 50 {
		t.Errorf("size_bytes %v, want about 2000", size)
	}
	lat, _ := got["latency_ms"].(map[string]any)
	for _, k := range []string{"p50", "p90", "p99", "max"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("no latency_ms.%s in %s", k, out.String())
		}
	}
	if r := sink.report(t); r.Unique != 300 {
		t.Errorf("sink: %+v", r)
	}
}

// With --json, a run that cannot start (the target refuses) still prints one
// object, sent 0 and the reason in first_problem, and fails: a script piping
// it to jq got nothing to parse.
func TestBenchJSONOfARunThatCannotStart(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused from now on
	var out, errOut bytes.Buffer
	err = App(&out, &errOut).Run([]string{"mf", "bench", "--target", addr, "--count", "5", "--json"})
	if err == nil {
		t.Fatalf("mf bench against a closed port succeeded: %s", out.String())
	}
	got := enginetest.JSONShape(t, "mf bench --json", out.Bytes(), map[string]string{
		"target": "string", "connections": "number", "lanes": "number", "size_bytes": "number", "rate": "number",
		"sent": "number", "accepted": "number", "rejected": "number", "errors": "number",
		"elapsed_seconds": "number", "throughput_per_second": "number", "latency_ms": "object",
		"sent_late": "number", "max_late_ms": "number", "started_unix": "number", "longest_gap_ms": "number",
		"first_problem": "string",
	})
	if got["sent"] != 0.0 || got["target"] != addr || !strings.Contains(got["first_problem"].(string), "dial") {
		t.Fatalf("mf bench --json against a closed port: %s; want sent 0 and the dial's failure", out.String())
	}
}

func TestBenchSinkCommandJSON(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	pr, pw := io.Pipe()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- App(&out, pw).Run([]string{"mf", "bench", "sink", "--listen", "127.0.0.1:0", "--expect", "10", "--json"})
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	addr := strings.TrimSpace(strings.TrimPrefix(line, "mf bench sink: listening on "))
	cl := enginetest.Dial(t, addr)
	for i := 1; i <= 10; i++ {
		cl.Send(sinkMessage("R1", "L0000", i))
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testDeadline):
		t.Fatal("sink did not stop at --expect")
	}
	// Exactly the keys mf bench sink --help and the README name.
	enginetest.JSONShape(t, "mf bench sink --json", out.Bytes(), map[string]string{
		"listen": "string", "received": "number", "unique": "number", "duplicates": "number", "reordered": "number",
		"unchecked": "number", "malformed": "number", "lanes": "number", "elapsed_seconds": "number",
		"rate_per_second": "number", "last_arrival_unix": "number", "expect": "number",
	})
	var got sinkReport
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	if got.Unique != 10 || got.Received != 10 || got.Lanes != 1 || got.Expect != 10 {
		t.Fatalf("sink: %+v", got)
	}
}

// TestBenchAndSinkTimeARunEndToEnd checks the two times bench/run takes
// its delivered rate from: mf bench's start, after its dials, and the
// sink's last arrival. It timed the run from before the processes started,
// which counted their start and read the rate about 3% low.
func TestBenchAndSinkTimeARunEndToEnd(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	sink := startSink(t, 200)
	before := time.Now()
	var out, errOut bytes.Buffer
	err := App(&out, &errOut).Run([]string{"mf", "bench", "--target", sink.addr, "--connections", "2", "--count", "200", "--json"})
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, errOut.String())
	}
	after := time.Now()
	var b benchReport
	if err := json.Unmarshal(out.Bytes(), &b); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	s := sink.report(t)
	lo, hi := unixSeconds(before), unixSeconds(after)+1e-6
	if b.StartedUnix < lo || b.StartedUnix > hi {
		t.Errorf("mf bench started_unix %.6f; want it within the run, %.6f to %.6f", b.StartedUnix, lo, hi)
	}
	if s.LastArrivalUnix < b.StartedUnix || s.LastArrivalUnix > hi {
		t.Errorf("sink last_arrival_unix %.6f; want it after mf bench's start %.6f and by the run's end %.6f", s.LastArrivalUnix, b.StartedUnix, hi)
	}
}

func TestBenchRefusesBadFlags(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--connections", "4", "--lanes", "2"}, "--lanes 2 is below --connections 4"},
		{[]string{"--count", "5", "--duration", "1s"}, "not both"},
		{[]string{"--count", "0"}, "--count 0"},
		{[]string{"--duration", "0s"}, "--duration 0s"},
		{[]string{"--rate", "-1"}, "--rate"},
		{[]string{"--redial", "-1s"}, "--redial -1s"},
		{[]string{"--target", "nowhere"}, "--target"},
		{[]string{"--tls-ca", "ca.pem"}, "need --tls"},
		// With --tls too, in the flags' words, not an outbound's keys.
		{[]string{"--tls", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls", "--tls-ca", "/nonexistent/ca.pem"}, "--tls-ca: open /nonexistent/ca.pem"},
		{[]string{"--tls", "--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, "--tls-cert/--tls-key: "},
		{[]string{"extra"}, "unexpected argument"},
	} {
		var out bytes.Buffer
		err := App(&out, &out).Run(append([]string{"mf", "bench"}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestBenchTemplate(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 100, 1000, 4096, 65536} {
		tpl := newBenchTemplate("ABC123", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), size)
		frame := tpl.appendFrame(nil, []byte("L0042"), []byte("9876"))
		payload, err := hl7.NewFrameReader(bytes.NewReader(frame), 1<<20).ReadFrame()
		if err != nil {
			t.Fatalf("size %d: not one MLLP frame: %v", size, err)
		}
		m, err := hl7.Parse(payload)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		for path, want := range map[string]string{
			"MSH-9": "ADT^A01^ADT_A01", "MSH-10": "ABC123-L0042-9876", "MSH-12": "2.5.1",
			"PID-3.1": "L0042", "PV1-19.1": "9876", "PV1-19.4": "ABC123", "PV1-44": "20260102030405",
		} {
			if got, _ := m.Field(path); got != want {
				t.Errorf("size %d: %s = %q, want %q", size, path, got, want)
			}
		}
		if size > 1000 && math.Abs(float64(tpl.size-size)) > 50 {
			t.Errorf("size %d: message is %d bytes", size, tpl.size)
		}
		if size <= 600 && tpl.size > 700 {
			t.Errorf("size %d: plain message is %d bytes", size, tpl.size)
		}
		if !tpl.isControlID([]byte("ABC123-L0042-9876"), []byte("L0042"), []byte("9876")) ||
			tpl.isControlID([]byte("ABC123-L0042-987"), []byte("L0042"), []byte("9876")) ||
			tpl.isControlID([]byte("ABC123-L0042-98760"), []byte("L0042"), []byte("9876")) {
			t.Errorf("isControlID wrong")
		}
	}
}

func TestScanAck(t *testing.T) {
	t.Parallel()
	m, _ := hl7.Parse([]byte(enginetest.ADT("CTL-1", "L0000")))
	for _, code := range []hl7.AckCode{hl7.AA, hl7.AR} {
		got, ctl, ok := scanAck(hl7.Ack(m, code, "a reason"))
		if !ok || string(got) != string(code) || string(ctl) != "CTL-1" {
			t.Errorf("%s: scanAck = %q %q %v", code, got, ctl, ok)
		}
	}
	for _, bad := range []string{"", "MSH", "MSH|^~\\&|\rPID|1\r", "XYZ|MSA|AA|1\r"} {
		if _, _, ok := scanAck([]byte(bad)); ok {
			t.Errorf("scanAck(%q) found an MSA", bad)
		}
	}
}

func TestLatencyHistogramWithinOnePercent(t *testing.T) {
	t.Parallel()
	h := new(latencyHistogram)
	var all []time.Duration
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		// Log-uniform from 1 µs to 10 s.
		d := time.Duration(math.Exp(math.Log(1e3) + r.Float64()*(math.Log(1e10)-math.Log(1e3))))
		h.record(d)
		all = append(all, d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := all[int(math.Ceil(q*float64(len(all))))-1]
		got := h.quantile(q)
		if e := math.Abs(float64(got-exact)) / float64(exact); e > 0.01 {
			t.Errorf("p%v: %s, exact %s: error %.2f%%", q*100, got, exact, e*100)
		}
	}
	if h.quantile(1) != all[len(all)-1] || h.max != all[len(all)-1] {
		t.Errorf("max %s, want %s", h.max, all[len(all)-1])
	}
	// Every bucket boundary maps back to its bucket.
	for i := range histBuckets {
		low, width := histBucket(i)
		if histIndex(low) != i || histIndex(low+width-1) != i {
			t.Fatalf("bucket %d [%d, +%d) does not map back", i, low, width)
		}
	}
}

// A receiver that cannot read a message (mf's own listener, for one above
// its max_message_bytes) answers AR with an empty MSA-2, since it has no
// control id to echo, and closes: that is the message's rejection, with
// the receiver's reason, not a reply out of step.
func TestBenchCountsARefusalWithoutControlIDAsARejection(t *testing.T) {
	t.Parallel()
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "`+addr+`"
max_message_bytes = 1024

[[outbound]]
name = "out"
type = "file"
directory = "{{dir}}/out"

[[route]]
from = "adt_in"
to = ["out"]
`)
	rep, err := bench(t, benchOptions{Target: addr, Count: 3, Size: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 3 || rep.Rejected != 3 || rep.Errors != 0 || rep.Accepted != 0 {
		t.Fatalf("sent %d accepted %d rejected %d errors %d, want 3 0 3 0 (%s)", rep.Sent, rep.Accepted, rep.Rejected, rep.Errors, rep.FirstProblem)
	}
	if !strings.Contains(rep.FirstProblem, "AR") || !strings.Contains(rep.FirstProblem, "larger than 1024 bytes") {
		t.Fatalf("first problem %q, want the AR and the receiver's reason", rep.FirstProblem)
	}
}

// A reply that is not the message's ACK (another control id, no MSA) is an
// error, and no ACK latency: the latency figures are those of ACKs.
func TestBenchTakesNoLatencyFromRepliesOutOfStep(t *testing.T) {
	t.Parallel()
	other, _ := hl7.Parse([]byte(enginetest.ADT("SOMEONE-ELSE", "P1")))
	for name, reply := range map[string][]byte{
		"another control id": hl7.Ack(other, hl7.AA, ""),
		"no MSA":             []byte("MSH|^~\\&|R|R|S|S|20260101000000||ACK|1|P|2.5.1\r"),
	} {
		addr := ackServer{answer: func([]byte) []byte { return reply }}.start(t)
		rep, err := bench(t, benchOptions{Target: addr, Count: 3})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Errors != 3 || rep.Accepted != 0 || !strings.Contains(rep.FirstProblem, "out of step") {
			t.Fatalf("%s: accepted %d errors %d (%s), want 0 and 3 out of step", name, rep.Accepted, rep.Errors, rep.FirstProblem)
		}
		if rep.Latency != (latencyMS{}) {
			t.Errorf("%s: latency %+v from no ACK, want none", name, rep.Latency)
		}
		// Zeros would read as an instant receiver.
		var out bytes.Buffer
		rep.print(&out)
		if !strings.Contains(out.String(), "ACK latency: none, no message was acknowledged") {
			t.Errorf("%s: summary\n%s\nwant it to say no ACK came", name, out.String())
		}
	}
}

// An open-loop run whose connection is still waiting for an ACK when the
// next message is due falls behind its schedule: the latency counts from
// when each message was due, and the report says how many went out late
// and by how much, since the target then saw less than --rate.
func TestBenchSaysWhenItFallsBehindTheSchedule(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	var n atomic.Int64
	addr := ackServer{code: hl7.AA, received: func() {
		if n.Add(1) == 1 {
			<-time.After(50 * time.Millisecond) // a receiver that stalls once
		}
	}}.start(t)
	var out, errOut bytes.Buffer
	args := []string{"mf", "bench", "--target", addr, "--rate", "1000", "--count", "100", "--json"}
	if err := App(&out, &errOut).Run(args); err != nil {
		t.Fatalf("%v (stderr %q)", err, errOut.String())
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	late, _ := got["sent_late"].(float64)
	maxLate, _ := got["max_late_ms"].(float64)
	if late < 10 || maxLate < 30 {
		t.Errorf("sent_late %v, max_late_ms %v after a 50 ms stall at 1000 msg/s: want at least 10 and 30 ms (%s)", got["sent_late"], got["max_late_ms"], out.String())
	}
	if p := got["latency_ms"].(map[string]any); p["max"].(float64) < 30 {
		t.Errorf("latency max %v ms, want the stall counted from when the messages were due", p["max"])
	}

	n.Store(0)
	out.Reset()
	if err := App(&out, &errOut).Run(args[:len(args)-1]); err != nil {
		t.Fatalf("%v (stderr %q)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "behind schedule") {
		t.Errorf("summary does not say it fell behind:\n%s", out.String())
	}

	// Closed loop has no schedule to fall behind.
	out.Reset()
	if err := App(&out, &errOut).Run([]string{"mf", "bench", "--target", addr, "--count", "10", "--json"}); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["sent_late"] != 0.0 || got["max_late_ms"] != 0.0 {
		t.Errorf("closed loop: sent_late %v, max_late_ms %v; want 0 and 0", got["sent_late"], got["max_late_ms"])
	}
}

// The first problem reported is the first in time, whichever connection
// had it: it was the first connection's (by number) that had one, so a
// rejection was hidden behind the hang-up that came after it.
func TestBenchReportsTheFirstProblemInTime(t *testing.T) {
	t.Parallel()
	secondSent := make(chan struct{})
	addr := ackServer{answer: func(p []byte) []byte {
		m, _ := hl7.Parse(p)
		switch lane, _ := m.Field("PID-3.1"); lane + "-" + m.Get(pathSeq) {
		case "L0001-1": // connection 1: refused first
			return hl7.Ack(m, hl7.AR, "refused first")
		case "L0001-2":
			close(secondSent) // connection 1 has counted its refusal
		case "L0000-2": // connection 0: hung up on after that
			select {
			case <-secondSent:
			case <-time.After(testDeadline):
			}
			return nil
		}
		return hl7.Ack(m, hl7.AA, "")
	}}.start(t)
	rep, _ := bench(t, benchOptions{Target: addr, Connections: 2, Count: 4})
	if rep.Rejected != 1 || rep.Errors != 1 {
		t.Fatalf("rejected %d errors %d, want 1 and 1 (%s)", rep.Rejected, rep.Errors, rep.FirstProblem)
	}
	if !strings.Contains(rep.FirstProblem, "refused first") {
		t.Fatalf("first problem %q, want the refusal that came first", rep.FirstProblem)
	}
}

// A --rate so low that a connection's interval overflows a duration, and a
// --size beyond what a receiver (or mf bench's own memory) can take, are
// refused naming the flag: the first ran closed loop while printing "open
// loop at 1e-300 msg/s", the second built messages of that size for every
// connection.
func TestBenchRefusesARateOrASizeOutOfRange(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	// Nothing listens there: a flag taken would end in a dial error.
	target := enginetest.FreeAddr(t)
	for _, tc := range []struct{ flag, value string }{
		{"--rate", "1e-300"}, {"--rate", "0.0001"}, {"--size", "100000000"},
	} {
		var out bytes.Buffer
		err := App(&out, &out).Run([]string{"mf", "bench", "--target", target, "--count", "1", tc.flag, tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.flag+" "+tc.value) {
			t.Errorf("mf bench %s %s: error %v; want one naming %s %s", tc.flag, tc.value, err, tc.flag, tc.value)
		}
	}
}

// The largest message --size allows is built to its size. How fast is
// BenchmarkBenchTemplateLargest's to say (the padding once counted the
// holes of the whole message again for each OBX segment, and 16 MB took
// 11 s before the first message went out); a deadline here failed under
// -race on a loaded machine, where the linear build took over 5 s.
func TestBenchBuildsTheLargestMessage(t *testing.T) {
	t.Parallel()
	tpl := newBenchTemplate("ABC123", time.Now(), benchMaxSize)
	if tpl.size < benchMaxSize-250 || tpl.size > benchMaxSize {
		t.Fatalf("message of %d bytes, want about %d", tpl.size, benchMaxSize)
	}
}

// BenchmarkBenchTemplateLargest times the build of the largest message
// --size allows (go test -bench BenchTemplateLargest ./cli/).
func BenchmarkBenchTemplateLargest(b *testing.B) {
	at := time.Now()
	for b.Loop() {
		newBenchTemplate("ABC123", at, benchMaxSize)
	}
}

// An empty address (a shell variable not set) is refused, naming the flag:
// mf bench sent to its default target, 127.0.0.1:2575, where an engine of
// its own may listen, mf bench sink listened on every interface at a port
// of the kernel's choosing, where no engine would find it, and mf send
// named a config key, not its flag. So is a port outside 1 to 65535, as an
// outbound's address refuses it.
func TestBenchRefusesAnEmptyAddress(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	msg := enginetest.WriteFile(t, t.TempDir(), "adt.hl7", []byte(enginetest.ADT("C1", "P1")))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--target", "", "--count", "1", "--timeout", "1s"}, `--target ""`},
		{[]string{"bench", "sink", "--listen", "", "--timeout", "1ms"}, `--listen ""`},
		{[]string{"send", "--to", "", msg}, `--to: want host:port, got ""`},
		// A port that is no port (config.CheckHostPort, as an outbound's
		// address has it): net took the service name, and dialled port 0.
		{[]string{"bench", "--target", "127.0.0.1:0", "--count", "1", "--timeout", "1s"}, `--target: want host:port with a port from 1 to 65535, got "127.0.0.1:0"`},
		{[]string{"send", "--to", "127.0.0.1:99999", msg}, `--to: want host:port with a port from 1 to 65535, got "127.0.0.1:99999"`},
		{[]string{"send", "--to", "localhost:http", msg}, `--to: want host:port with a port from 1 to 65535, got "localhost:http"`},
		{[]string{"send", "--to", "127.0.0.1:2575", "--connections", "1001", msg}, `--connections 1001: want at most 1000`},
	} {
		out, err := runMF(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mf %q: error %v, printed %q; want one naming %s", tc.args, err, out, tc.want)
		}
	}
}

// --connections has an upper bound, as mf send's has: each connection holds
// a latency histogram (58 KiB) and a copy of the message (up to 16 MiB),
// made before the first dial, so --connections 1000000 (which --lanes
// allowed) asked for 58 GB and more, and was not refused.
func TestBenchRefusesTooManyConnections(t *testing.T) {
	// Not parallel: urfave/cli's apps share global flags (--help).
	// Nothing listens there: a flag taken would end in a dial error.
	target := enginetest.FreeAddr(t)
	n := strconv.Itoa(config.MaxOutboundConnections + 1)
	var out bytes.Buffer
	err := App(&out, &out).Run([]string{"mf", "bench", "--target", target, "--count", "1", "--connections", n, "--lanes", n})
	if err == nil || !strings.Contains(err.Error(), "--connections "+n+": at most") {
		t.Fatalf("mf bench --connections %s: error %v; want one naming --connections %s and its bound", n, err, n)
	}
	// The bound itself is taken: the run ends in the dial error.
	n = strconv.Itoa(config.MaxOutboundConnections)
	err = App(&out, &out).Run([]string{"mf", "bench", "--target", target, "--count", "1", "--connections", n})
	if err == nil || !strings.Contains(err.Error(), "dial") {
		t.Fatalf("mf bench --connections %s: error %v; want the dial's", n, err)
	}
}

// With --redial, a connection whose target goes away keeps dialling until
// it is back, and the report gives the longest time between two accepted
// messages: what a failover at a VIP costs the senders. Without it the run
// stopped at the first refused dial, so mf bench could not measure one.
func TestBenchRedialsAcrossAnOutageAndReportsItsLength(t *testing.T) {
	first, err := listenSink("127.0.0.1:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	addr := first.Addr().String()
	stopFirst := make(chan struct{})
	firstDone := make(chan sinkReport, 1)
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { <-stopFirst; cancel() }()
		firstDone <- first.run(ctx)
	}()
	type result struct {
		rep *benchReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := runBench(context.Background(), benchOptions{Target: addr, Connections: 2, Duration: 3 * time.Second, Rate: 200, Redial: 20 * time.Second, Timeout: 2 * time.Second})
		done <- result{rep, err}
	}()
	// The target goes away once messages flow, for at least outage.
	const outage = 500 * time.Millisecond
	deadline := time.Now().Add(testDeadline)
	for first.report().Received < 20 {
		if time.Now().After(deadline) {
			t.Fatal("the target received nothing from mf bench")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stopFirst)
	r1 := <-firstDone
	time.Sleep(outage) // the fault itself: nothing listens for this long
	second, err := listenSink(addr, 0)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	secondDone := make(chan sinkReport, 1)
	go func() { secondDone <- second.run(ctx) }()
	var res result
	select {
	case res = <-done:
	case <-time.After(testDeadline):
		t.Fatal("bench did not end")
	}
	cancel()
	r2 := <-secondDone
	if res.rep == nil {
		t.Fatalf("bench did not run: %v", res.err)
	}
	rep := res.rep
	if r1.Received == 0 || r2.Received == 0 {
		t.Fatalf("the target received %d before the outage and %d after; want messages on both sides", r1.Received, r2.Received)
	}
	if rep.Accepted > r1.Received+r2.Received {
		t.Errorf("accepted %d, but the target received %d and %d", rep.Accepted, r1.Received, r2.Received)
	}
	// At most one message a connection was in hand when the target went.
	if rep.Errors > 2 {
		t.Errorf("%d errors; want at most one a connection, the message in hand at the outage (first: %s)", rep.Errors, rep.FirstProblem)
	}
	if gap := time.Duration(rep.LongestGapMS * float64(time.Millisecond)); gap < outage {
		t.Errorf("longest gap between accepted messages %v; want at least the outage, %v", gap, outage)
	}
}

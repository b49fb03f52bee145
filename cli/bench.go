package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/lanes"
)

// benchDescription is the help text of mf bench: what it sends, where a sink
// finds the lane and the sequence number, and what the figures mean.
const benchDescription = `mf bench sends HL7 ADT^A01 messages over MLLP, one outstanding message per
connection (it waits for each ACK before sending the next, as a real partner does),
and reports throughput and ACK latency. It exits non-zero if any message was not
accepted (AA or CA).

Each message carries its lane and its per-lane sequence number (from 1):
  PID-3.1   the lane, L0000, L0001, ... (lane L always goes over connection L % connections,
            so each lane is sent in order)
  PV1-19    the sequence number, as <seq>^^^<run>^VN (PV1-19.1 the number, PV1-19.4 the run)
  MSH-10    <run>-<lane>-<seq>, unique per run
<run> is 6 random hex digits, new for every run. mf bench sink reads PID-3.1, PV1-19.1
and PV1-19.4 to count duplicates and reordered messages per lane.

Closed loop (--rate 0): each connection sends its next message as soon as the previous
one is acknowledged; latency runs from the write to the ACK. Open loop (--rate R):
messages are due on a fixed schedule of R per second in total; latency runs from the
moment a message was due, so a slow receiver shows as latency rather than as a slower
schedule (no coordinated omission). It also includes how late the generator woke up
for the message: Go timers wake within about a millisecond, so open-loop figures
below 1 ms say little; use closed loop to measure sub-millisecond receivers. A
connection whose ACK has not come back when its next message is due sends it late,
and with --duration every message due before the end is still sent, so such a run
lasts longer; the report then says how many went out more than 2 ms late and the
latest (sent_late, max_late_ms): the target saw less than --rate.

--size pads the message with OBX segments of free text (a progress note) to about
that many bytes; the default is a plain ADT^A01 of about 600 bytes.

Throughput is the messages accepted a second, from the first send (every connection
is dialled before it) to the last ACK. p50, p90 and p99 are nearest-rank percentiles
of the latency of every message's ACK, AA or a NAK (a reply that is not the
message's ACK is an error and has no latency), read from a histogram to within 0.4%;
max is exact.

A message that gets no usable ACK (a timeout, the connection lost, a reply out of
step) counts as an error and is not sent again: its connection is closed and dials
again for the next message, once; a connection that cannot dial stops there, and the
run exits non-zero. With --redial D it keeps dialling, every 100 ms, for up to D
before it stops: a run then goes on across a failover at a VIP, and the longest
time between two accepted messages (longest_gap_ms) is the outage the senders saw. An AR or CR with an empty MSA-2 (the receiver could not read the
message: one too large for it, say) is that message's rejection.

--json prints one object: target, connections, lanes, size_bytes, rate (0: closed
loop), sent, accepted, rejected (AE, AR, CE or CR), errors, elapsed_seconds,
throughput_per_second (accepted), latency_ms {p50, p90, p99, max}, sent_late,
max_late_ms, started_unix (when the first message could go, after every connection
was dialled: Unix seconds, to the microsecond), longest_gap_ms (the longest time
between two accepted messages of any connection, from the first to the last), and
first_problem when a message was not accepted. With mf bench sink's last_arrival_unix it times a run end to end.`

// Bench defaults.
const (
	benchDefaultTarget = "127.0.0.1:2575"
	benchDefaultCount  = 10000
	// benchMaxAckBytes bounds an ACK frame; an ACK is a few hundred bytes.
	benchMaxAckBytes = 1 << 20
	// benchMaxConnections bounds --connections, as mf send's: each holds a
	// latency histogram (58 KiB) and a copy of the message, made before
	// the first dial.
	benchMaxConnections = config.MaxOutboundConnections
	// benchMaxLanes bounds --lanes, and the memory the lanes take (about
	// 40 bytes each).
	benchMaxLanes = 1_000_000
	// benchMaxSize bounds --size: what mf bench sink reads, and far more
	// than HL7 messages carry, with a copy for each connection.
	benchMaxSize = sinkMaxFrameBytes
	// benchMinRate is the lowest open-loop --rate, so that a connection's
	// interval between messages fits a time.Duration.
	benchMinRate = 0.001
	// benchNever is a schedule offset no run reaches, in nanoseconds.
	benchNever = float64(100 * 365 * 24 * time.Hour)
	// benchLateSlack is how long after it was due an open-loop message may
	// go out and still count as on time: Go timers wake within about a
	// millisecond, and this leaves as much again.
	benchLateSlack = 2 * time.Millisecond
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:        "bench",
		Usage:       "send ADT^A01 messages over MLLP as fast as acknowledged (or at --rate) and report throughput and ACK latency",
		Description: benchDescription,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "target", Value: benchDefaultTarget, Usage: "MLLP listener address host:port"},
			&cli.IntFlag{Name: "connections", Value: 1, Usage: "connections, each with one message outstanding (at most 1000)"},
			&cli.IntFlag{Name: "count", Value: benchDefaultCount, Usage: "messages to send in all (or use --duration)"},
			&cli.DurationFlag{Name: "duration", DefaultText: "none", Usage: "send for this long instead of --count messages"},
			&cli.Float64Flag{Name: "rate", DefaultText: "0, closed loop", Usage: "messages per second in all, on a fixed schedule (0: as fast as ACKs come back)"},
			&cli.IntFlag{Name: "lanes", DefaultText: "--connections", Usage: "distinct PID-3.1 values; lane L goes over connection L % connections"},
			&cli.IntFlag{Name: "size", DefaultText: "a plain ADT^A01, about 600", Usage: "approximate message size in bytes, padded with OBX notes (at most 16 MiB)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object at the end, nothing else"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "wait this long for each ACK (and for each dial)"},
			&cli.DurationFlag{Name: "redial", DefaultText: "0, dial again once", Usage: "keep dialling a lost target for up to this long (every 100 ms) instead of stopping the connection: a run across a failover"},
		}, clientTLSFlags()...),
		Subcommands: []*cli.Command{benchSinkCommand()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("bench: unexpected argument %q (the only subcommand is sink)", c.Args().First())
			}
			o := benchOptions{
				Target:      c.String("target"),
				Connections: c.Int("connections"),
				Count:       c.Int("count"),
				Duration:    c.Duration("duration"),
				Rate:        c.Float64("rate"),
				Lanes:       c.Int("lanes"),
				Size:        c.Int("size"),
				Timeout:     c.Duration("timeout"),
				Redial:      c.Duration("redial"),
			}
			// runBench takes a zero for the default; given on the command
			// line, it is refused rather than silently replaced (an empty
			// --target sent to the default, where an engine may listen).
			if o.Target == "" {
				return errors.New(`bench: --target "": want host:port`)
			}
			for _, name := range []string{"connections", "lanes"} {
				if c.IsSet(name) && c.Int(name) < 1 {
					return fmt.Errorf("bench: --%s %d: want at least 1", name, c.Int(name))
				}
			}
			if o.Redial < 0 {
				return fmt.Errorf("bench: --redial %s: want a duration, or 0 to dial again once", o.Redial)
			}
			if c.IsSet("timeout") && o.Timeout <= 0 {
				return fmt.Errorf("bench: --timeout %s: want a positive duration", o.Timeout)
			}
			switch {
			case c.IsSet("duration") && c.IsSet("count"):
				return errors.New("bench: give --count or --duration, not both")
			case c.IsSet("duration"):
				if o.Duration <= 0 {
					return fmt.Errorf("bench: --duration %s: want a positive duration", o.Duration)
				}
				o.Count = 0
			case o.Count < 1:
				return fmt.Errorf("bench: --count %d: want at least 1", o.Count)
			}
			tlsCfg, err := clientTLSConfig(withClientTLS(c, config.Outbound{}))
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			o.TLS = tlsCfg
			asJSON := c.Bool("json")
			if !asJSON && isTerminal(c.App.Writer) {
				o.Progress = c.App.Writer
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rep, err := runBench(ctx, o)
			if err != nil && rep == nil {
				if !asJSON {
					return err
				}
				// A script reads one object whatever happened: a run that
				// could not start (the target not reached) sent nothing,
				// and says why.
				d := o.withDefaults()
				rep = &benchReport{Target: d.Target, Connections: d.Connections, Lanes: d.Lanes, Rate: d.Rate, FirstProblem: err.Error()}
			}
			if asJSON {
				b, jerr := json.Marshal(rep)
				if jerr != nil {
					return jerr
				}
				fmt.Fprintln(c.App.Writer, string(b))
			} else {
				rep.print(c.App.Writer)
			}
			if err != nil {
				return err
			}
			return rep.failure()
		},
	}
}

// benchOptions is what mf bench does; the flags fill it and nothing else.
type benchOptions struct {
	// Target is the MLLP listener's host:port.
	Target string
	// Connections is the number of connections, each with one message
	// outstanding at a time.
	Connections int
	// Count is the number of messages to send in all; 0 when Duration is
	// set.
	Count int
	// Duration, when Count is 0, is how long messages are sent for.
	Duration time.Duration
	// Rate is the total messages per second of the open-loop schedule; 0
	// means closed loop.
	Rate float64
	// Lanes is the number of distinct PID-3.1 values (0: Connections).
	Lanes int
	// Size is the approximate message size in bytes (0: the plain ADT^A01).
	Size int
	// Timeout bounds each dial and each wait for an ACK.
	Timeout time.Duration
	// Redial is how long a connection that lost its target keeps dialling
	// it (every benchRedialEvery) before it stops; 0: it dials once.
	Redial time.Duration
	// TLS, when not nil, is the client TLS configuration.
	TLS *tls.Config
	// Progress, when not nil, receives a progress line once a second,
	// rewritten in place with \r (a terminal).
	Progress io.Writer
}

// withDefaults fills the zero fields with their defaults.
func (o benchOptions) withDefaults() benchOptions {
	if o.Target == "" {
		o.Target = benchDefaultTarget
	}
	if o.Connections == 0 {
		o.Connections = 1
	}
	if o.Lanes == 0 {
		o.Lanes = o.Connections
	}
	if o.Count == 0 && o.Duration == 0 {
		o.Count = benchDefaultCount
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	return o
}

// validate names the flag that is wrong.
func (o benchOptions) validate() error {
	if err := config.CheckHostPort(o.Target, false); err != nil {
		return fmt.Errorf("--target: %w", err)
	}
	switch {
	case o.Connections < 1:
		return fmt.Errorf("--connections %d: want at least 1", o.Connections)
	case o.Connections > benchMaxConnections:
		return fmt.Errorf("--connections %d: at most %d", o.Connections, benchMaxConnections)
	case o.Count < 0:
		return fmt.Errorf("--count %d: want at least 1", o.Count)
	case o.Duration < 0:
		return fmt.Errorf("--duration %s: want a positive duration", o.Duration)
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("--rate %v: want 0 (closed loop) or messages per second", o.Rate)
	case o.Rate > 0 && o.Rate < benchMinRate:
		return fmt.Errorf("--rate %v: want 0 (closed loop) or at least %v messages per second", o.Rate, benchMinRate)
	case o.Lanes > benchMaxLanes:
		return fmt.Errorf("--lanes %d: at most %d", o.Lanes, benchMaxLanes)
	case o.Lanes < o.Connections:
		return fmt.Errorf("--lanes %d is below --connections %d: lane L goes over connection L %% connections, so %d connections would stay idle; raise --lanes or lower --connections",
			o.Lanes, o.Connections, o.Connections-o.Lanes)
	case o.Size < 0:
		return fmt.Errorf("--size %d: want a size in bytes", o.Size)
	case o.Size > benchMaxSize:
		return fmt.Errorf("--size %d: at most %d (16 MiB, what mf bench sink reads)", o.Size, benchMaxSize)
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout %s: want a positive duration", o.Timeout)
	}
	return nil
}

// benchReport is what mf bench prints, and with --json its one object.
type benchReport struct {
	Target      string  `json:"target"`
	Connections int     `json:"connections"`
	Lanes       int     `json:"lanes"`
	SizeBytes   int     `json:"size_bytes"` // payload size of the first message
	Rate        float64 `json:"rate"`       // 0: closed loop
	// Sent counts messages sent or tried; Accepted those answered AA (or CA),
	// Rejected those answered AE or AR (CE, CR), Errors those that got no
	// usable ACK (timeout, connection lost, an ACK out of step).
	Sent                int64     `json:"sent"`
	Accepted            int64     `json:"accepted"`
	Rejected            int64     `json:"rejected"`
	Errors              int64     `json:"errors"`
	ElapsedSeconds      float64   `json:"elapsed_seconds"`
	ThroughputPerSecond float64   `json:"throughput_per_second"` // accepted per second
	Latency             latencyMS `json:"latency_ms"`
	// StartedUnix is when the clock started, once every connection was
	// dialled (Unix seconds, microseconds): with the sink's LastArrivalUnix
	// it gives the delivered rate without the start of the processes.
	StartedUnix float64 `json:"started_unix"`
	// LongestGapMS is the longest time between two accepted messages of
	// any connection, from the first accepted to the last: across a
	// failover (with Redial), the outage the senders saw.
	LongestGapMS float64 `json:"longest_gap_ms"`
	// SentLate counts the messages of an open-loop run written more than
	// benchLateSlack after they were due (their connection still waiting
	// for the previous ACK, or the generator short of CPU), and MaxLateMS
	// is the latest of them: the target then saw less than Rate. Both are
	// 0 in closed loop.
	SentLate  int64   `json:"sent_late"`
	MaxLateMS float64 `json:"max_late_ms"`
	// FirstProblem describes the first message not accepted, if any.
	FirstProblem string `json:"first_problem,omitempty"`

	count       int  // messages asked for; 0 with a duration
	interrupted bool // stopped by SIGINT or SIGTERM
}

// latencyMS are ACK latency percentiles in milliseconds.
type latencyMS struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// print writes the human summary.
func (r *benchReport) print(w io.Writer) {
	mode := "closed loop"
	if r.Rate > 0 {
		mode = fmt.Sprintf("open loop at %g msg/s", r.Rate)
	}
	fmt.Fprintf(w, "target %s: %d connections, %d lanes, %d-byte messages, %s\n",
		r.Target, r.Connections, r.Lanes, r.SizeBytes, mode)
	fmt.Fprintf(w, "sent %d, accepted %d, rejected %d, errors %d in %.2fs: %.0f msg/s accepted\n",
		r.Sent, r.Accepted, r.Rejected, r.Errors, r.ElapsedSeconds, r.ThroughputPerSecond)
	if r.Accepted+r.Rejected == 0 {
		// Zeros would read as an instant receiver (--json keeps its shape).
		fmt.Fprintln(w, "ACK latency: none, no message was acknowledged")
	} else {
		fmt.Fprintf(w, "ACK latency (ms): p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n",
			r.Latency.P50, r.Latency.P90, r.Latency.P99, r.Latency.Max)
	}
	if r.SentLate > 0 {
		fmt.Fprintf(w, "behind schedule: %d of %d messages went out more than %s after they were due, the latest %.1f ms late "+
			"(their connection still waited for an ACK, or mf bench was short of CPU); their latency counts from when they were due. "+
			"Sent %.0f msg/s of the %g asked; each connection has one message outstanding, so at %g msg/s over %d an ACK slower than %.1f ms delays the next\n",
			r.SentLate, r.Sent, benchLateSlack, r.MaxLateMS, float64(r.Sent)/r.ElapsedSeconds, r.Rate,
			r.Rate, r.Connections, float64(r.Connections)*1e3/r.Rate)
	}
	if r.Accepted > 1 {
		fmt.Fprintf(w, "longest gap between two accepted messages: %.1f ms\n", r.LongestGapMS)
	}
	if r.FirstProblem != "" {
		fmt.Fprintf(w, "first problem: %s\n", r.FirstProblem)
	}
}

// failure says why the run failed, or returns nil if every message asked
// for was sent and accepted.
func (r *benchReport) failure() error {
	switch {
	case r.interrupted:
		return fmt.Errorf("bench: interrupted after %d messages (%d accepted)", r.Sent, r.Accepted)
	case r.Rejected > 0 || r.Errors > 0:
		return fmt.Errorf("bench: %d of %d messages not accepted (%d rejected, %d errors); first: %s",
			r.Rejected+r.Errors, r.Sent, r.Rejected, r.Errors, r.FirstProblem)
	case r.count > 0 && r.Sent < int64(r.count):
		return fmt.Errorf("bench: only %d of %d messages sent; %s", r.Sent, r.count, r.FirstProblem)
	case r.Sent == 0:
		return errors.New("bench: no message sent")
	}
	return nil
}

// runBench runs a bench. It returns a nil report when nothing could start
// (bad options, the target unreachable); otherwise the report, and an
// error only if a connection had to stop early (the report's failure method
// judges the counts).
func runBench(ctx context.Context, o benchOptions) (*benchReport, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	run := newRunID()
	start := time.Now()
	tpl := newBenchTemplate(run, start, o.Size)
	workers := make([]*benchWorker, o.Connections)
	gaps := new(ackGaps)
	for i := range workers {
		workers[i] = &benchWorker{id: i, o: &o, tpl: tpl, hist: new(latencyHistogram), gaps: gaps}
	}
	for l := range o.Lanes {
		w := workers[l%o.Connections]
		w.lanes = append(w.lanes, benchLane{id: []byte(laneID(l))})
	}
	if o.Count > 0 {
		for i, w := range workers {
			w.quota = int64(o.Count / o.Connections)
			if i < o.Count%o.Connections {
				w.quota++
			}
		}
	} else {
		for _, w := range workers {
			w.quota = -1
		}
	}

	// Dial every connection before the clock starts: a target that cannot
	// be reached fails the run at once.
	for _, w := range workers {
		if err := w.connect(ctx); err != nil {
			for _, w := range workers {
				w.disconnect()
			}
			return nil, fmt.Errorf("bench: %w", err)
		}
	}

	var end time.Time
	start = time.Now()
	if o.Count == 0 {
		end = start.Add(o.Duration)
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, start, end)
		}()
	}
	if o.Progress != nil {
		done := make(chan struct{})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			reportProgress(o.Progress, workers, start, done)
		}()
		wg.Wait()
		close(done)
		<-stopped
	} else {
		wg.Wait()
	}
	elapsed := time.Since(start)
	if o.Rate > 0 && ctx.Err() == nil {
		// In open loop the first message is due at start and message n at
		// start + (n-1)/Rate: n messages take n intervals of the
		// schedule, not n-1 (10 at 10/s read 11 msg/s in 0.90 s). A run
		// cut short (Ctrl-C) ends when it was cut.
		elapsed += time.Duration(float64(time.Second) / o.Rate)
	}

	rep := &benchReport{
		Target: o.Target, Connections: o.Connections, Lanes: o.Lanes, Rate: o.Rate,
		SizeBytes:      tpl.size,
		ElapsedSeconds: elapsed.Seconds(),
		StartedUnix:    unixSeconds(start),
		LongestGapMS:   float64(gaps.longestGap()) / float64(time.Millisecond),
		count:          o.Count,
		interrupted:    ctx.Err() != nil,
	}
	hist := new(latencyHistogram)
	var (
		stopErr error
		maxLate time.Duration
		firstAt time.Time // of rep.FirstProblem
	)
	for _, w := range workers {
		rep.SentLate += w.late
		maxLate = max(maxLate, w.maxLate)
		rep.Sent += w.sent.Load()
		rep.Accepted += w.accepted.Load()
		rep.Rejected += w.rejected.Load()
		rep.Errors += w.errored.Load()
		hist.merge(w.hist)
		if w.firstProblem != "" && (rep.FirstProblem == "" || w.firstProblemAt.Before(firstAt)) {
			rep.FirstProblem, firstAt = w.firstProblem, w.firstProblemAt
		}
		if stopErr == nil && w.stopErr != nil {
			stopErr = fmt.Errorf("bench: connection %d stopped: %w", w.id, w.stopErr)
		}
	}
	if elapsed > 0 {
		rep.ThroughputPerSecond = float64(rep.Accepted) / elapsed.Seconds()
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rep.Latency = latencyMS{
		P50: ms(hist.quantile(0.50)), P90: ms(hist.quantile(0.90)),
		P99: ms(hist.quantile(0.99)), Max: ms(hist.max),
	}
	rep.MaxLateMS = ms(maxLate)
	return rep, stopErr
}

// unixSeconds is t as Unix seconds, to the microsecond (a float64 holds
// no more of today's times).
func unixSeconds(t time.Time) float64 {
	return float64(t.UnixMicro()) / 1e6
}

// reportProgress rewrites a progress line on w once a second until done.
func reportProgress(w io.Writer, workers []*benchWorker, start time.Time, done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastAccepted int64
	for {
		select {
		case <-done:
			fmt.Fprint(w, "\r\x1b[K") // clear the line for the summary
			return
		case <-t.C:
		}
		var sent, accepted, notAccepted int64
		for _, wk := range workers {
			sent += wk.sent.Load()
			accepted += wk.accepted.Load()
			notAccepted += wk.rejected.Load() + wk.errored.Load()
		}
		fmt.Fprintf(w, "\r%6.0fs  sent %d  accepted %d  not accepted %d  %d msg/s\x1b[K",
			time.Since(start).Seconds(), sent, accepted, notAccepted, accepted-lastAccepted)
		lastAccepted = accepted
	}
}

// benchLane is one lane of a worker: its id (PID-3.1) and the last
// sequence number sent.
type benchLane struct {
	id  []byte
	seq uint64
}

// benchWorker drives one connection in lock step: write a message, read its
// ACK, and again. It owns everything but its counters, which the progress
// line reads.
type benchWorker struct {
	id    int
	o     *benchOptions
	tpl   *benchTemplate
	lanes []benchLane // the lanes of this connection, sent in turn
	quota int64       // messages to send; -1 until the run's end

	conn net.Conn
	fr   *hl7.FrameReader
	stop func() bool // unregisters the close-on-cancel of conn

	hist                              *latencyHistogram
	gaps                              *ackGaps // shared by the run's workers
	sent, accepted, rejected, errored atomic.Int64
	late                              int64         // open loop: messages written late
	maxLate                           time.Duration // and the latest of them
	firstProblem                      string
	firstProblemAt                    time.Time
	stopErr                           error // why the worker stopped early
}

// connect dials the target; cancelling ctx later closes the connection,
// which interrupts a write or a wait for an ACK.
func (w *benchWorker) connect(ctx context.Context) error {
	nd := &net.Dialer{Timeout: w.o.Timeout, KeepAlive: 30 * time.Second}
	var (
		nc  net.Conn
		err error
	)
	if w.o.TLS != nil {
		nc, err = (&tls.Dialer{NetDialer: nd, Config: w.o.TLS}).DialContext(ctx, "tcp", w.o.Target)
	} else {
		nc, err = nd.DialContext(ctx, "tcp", w.o.Target)
	}
	if err != nil {
		return fmt.Errorf("dial %s: %w", w.o.Target, err)
	}
	w.conn, w.fr = nc, hl7.NewFrameReader(nc, benchMaxAckBytes)
	w.stop = context.AfterFunc(ctx, func() { _ = nc.Close() })
	return nil
}

// benchRedialEvery is how often a connection dials a target it lost, with
// --redial.
const benchRedialEvery = 100 * time.Millisecond

// redial dials the target again: once, or with Redial set, every
// benchRedialEvery until it answers or Redial has passed.
func (w *benchWorker) redial(ctx context.Context) error {
	giveUp := time.Now().Add(w.o.Redial)
	for {
		err := w.connect(ctx)
		if err == nil || w.o.Redial <= 0 || !time.Now().Before(giveUp) {
			if err != nil && w.o.Redial > 0 {
				err = fmt.Errorf("%w (dialled again for %s)", err, w.o.Redial)
			}
			return err
		}
		select {
		case <-time.After(benchRedialEvery):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ackGaps times the longest stretch with no accepted message, over all
// the workers of a run.
type ackGaps struct {
	mu      sync.Mutex
	last    time.Time
	longest time.Duration
}

// accepted notes a message accepted at now.
func (g *ackGaps) accepted(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.last.IsZero() {
		g.longest = max(g.longest, now.Sub(g.last))
	}
	if now.After(g.last) {
		g.last = now
	}
}

func (g *ackGaps) longestGap() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.longest
}

func (w *benchWorker) disconnect() {
	if w.conn == nil {
		return
	}
	w.stop()
	_ = w.conn.Close()
	w.conn, w.fr = nil, nil
}

// problem records the first problem of the worker, for the report.
func (w *benchWorker) problem(format string, args ...any) {
	if w.firstProblem == "" {
		w.firstProblem = fmt.Sprintf("connection %d: ", w.id) + fmt.Sprintf(format, args...)
		w.firstProblemAt = time.Now()
	}
}

// run sends the worker's messages: its quota, or until end. In open loop
// message i of this worker is due at start + offset + i*interval, the
// workers' schedules interleaved so the total is Rate evenly spread.
func (w *benchWorker) run(ctx context.Context, start, end time.Time) {
	defer w.disconnect()
	var interval, offset float64 // nanoseconds
	if w.o.Rate > 0 {
		interval = float64(w.o.Connections) * 1e9 / w.o.Rate
		offset = float64(w.id) * 1e9 / w.o.Rate
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var (
		frame  []byte
		digits [20]byte
	)
	for i := int64(0); w.quota < 0 || i < w.quota; i++ {
		if len(w.lanes) == 0 {
			return
		}
		var due time.Time
		if interval > 0 {
			// Past a century (a count that takes longer at the rate) a
			// message is never due, rather than wrapping into the past.
			due = start.Add(time.Duration(min(offset+float64(i)*interval, benchNever)))
			if !end.IsZero() && !due.Before(end) {
				return
			}
			if d := time.Until(due); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return
				}
			}
		} else {
			due = time.Now()
			if !end.IsZero() && !due.Before(end) {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		if w.conn == nil {
			// The last exchange failed: dial again. A target that stays
			// away (past --redial) stops this connection (its quota is
			// not sent).
			if err := w.redial(ctx); err != nil {
				if ctx.Err() == nil {
					w.stopErr = err
				}
				return
			}
		}
		lane := &w.lanes[int(i%int64(len(w.lanes)))]
		lane.seq++
		seq := strconv.AppendUint(digits[:0], lane.seq, 10)
		frame = w.tpl.appendFrame(frame[:0], lane.id, seq)
		if w.o.Rate == 0 {
			due = time.Now()
		} else if late := time.Since(due); late > benchLateSlack {
			w.late++
			w.maxLate = max(w.maxLate, late)
		}
		w.exchange(ctx, frame, lane.id, seq, due)
	}
}

// exchange writes one frame, reads its ACK and counts the outcome. On an
// error the connection is closed: the next message dials again.
func (w *benchWorker) exchange(ctx context.Context, frame, lane, seq []byte, due time.Time) {
	w.sent.Add(1)
	_ = w.conn.SetDeadline(time.Now().Add(w.o.Timeout))
	if _, err := w.conn.Write(frame); err != nil {
		w.fail(ctx, "writing %s-%s-%s: %v", w.tpl.run, lane, seq, err)
		return
	}
	ack, err := w.fr.ReadFrame()
	if err != nil {
		w.fail(ctx, "waiting for the ACK of %s-%s-%s: %v", w.tpl.run, lane, seq, err)
		return
	}
	latency := time.Since(due) // recorded only for this message's ACK
	code, ctl, ok := scanAck(ack)
	if ok && len(ctl) == 0 && hl7.AckCode(code).Outcome() == hl7.Reject {
		// A receiver that could not read the message (too large for it,
		// say) has no control id to echo: on a connection that carries
		// one message at a time, this is that message's refusal. The
		// receiver's state after it is unknown (mf's listener closes).
		w.hist.record(latency)
		w.rejected.Add(1)
		w.problem("%s-%s-%s answered %s without naming its control id (MSA-2 empty): the receiver could not read it: %.200s",
			w.tpl.run, lane, seq, code, ackDetail(ack))
		w.disconnect()
		return
	}
	if !ok || !w.tpl.isControlID(ctl, lane, seq) {
		got := "no MSA segment"
		if ok {
			got = fmt.Sprintf("MSA-2 %.40q", ctl)
		}
		w.fail(ctx, "reply to %s-%s-%s is out of step (%s); connection closed", w.tpl.run, lane, seq, got)
		return
	}
	switch hl7.AckCode(code).Outcome() {
	case hl7.Accept:
		w.hist.record(latency)
		w.accepted.Add(1)
		w.gaps.accepted(time.Now())
		return
	case hl7.Reject, hl7.Error:
		if hl7.AckCode(code).Valid() {
			w.hist.record(latency)
			w.rejected.Add(1)
			if w.firstProblem == "" {
				w.problem("%s-%s-%s answered %s %.200s", w.tpl.run, lane, seq, code, ackDetail(ack))
			}
			return
		}
	}
	w.fail(ctx, "reply to %s-%s-%s has MSA-1 %.8q, not an acknowledgment code", w.tpl.run, lane, seq, code)
}

// ackDetail is what a NAK says of its reason: ERR's error code and message,
// or else MSA-3.
func ackDetail(ack []byte) string {
	a, err := hl7.ParseAck(ack)
	if err != nil {
		return ""
	}
	if detail := strings.TrimSpace(a.ErrorCode + " " + a.ErrorMessage); detail != "" {
		return detail
	}
	return a.Text
}

// fail counts an exchange that got no usable ACK and closes the
// connection, unless the run was interrupted: then nothing is counted.
func (w *benchWorker) fail(ctx context.Context, format string, args ...any) {
	w.disconnect()
	if ctx.Err() != nil {
		return
	}
	w.errored.Add(1)
	w.problem(format, args...)
}

// scanAck finds MSA-1 and MSA-2 in an ACK without parsing it (and without
// allocating): segments end at CR or LF and the field separator is MSH-1.
func scanAck(p []byte) (code, control []byte, ok bool) {
	if len(p) < 4 || !bytes.HasPrefix(p, []byte("MSH")) {
		return nil, nil, false
	}
	fs := p[3]
	for rest := p; len(rest) > 0; {
		line := rest
		if i := bytes.IndexAny(rest, "\r\n"); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if len(line) < 4 || line[3] != fs || string(line[:3]) != "MSA" {
			continue
		}
		f := line[4:]
		i := bytes.IndexByte(f, fs)
		if i < 0 {
			return f, nil, true
		}
		code, f = f[:i], f[i+1:]
		if j := bytes.IndexByte(f, fs); j >= 0 {
			f = f[:j]
		}
		return code, f, true
	}
	return nil, nil, false
}

// newRunID returns 6 random hexadecimal digits.
func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return strings.ToUpper(hex.EncodeToString(b[:]))
}

// laneID is the PID-3.1 of lane l: L0000, L0001, ...
func laneID(l int) string { return fmt.Sprintf("L%04d", l) }

// Template holes: where the lane id and the sequence number go.
const (
	holeLane = '\x01'
	holeSeq  = '\x02'
)

// benchTemplate is the one message every bench message is cut from, framed:
// static chunks and, between them, the lane id or the sequence number.
// Building a message is a few appends into a reused buffer.
type benchTemplate struct {
	run    string
	chunks [][]byte
	holes  []byte // holes[i] follows chunks[i]: holeLane or holeSeq
	ctl    []byte // "<run>-": the start of every MSH-10
	size   int    // payload bytes of lane L0000's first message
}

// benchNote is the text the OBX padding is cut from: realistic free text
// without HL7 delimiters, so receivers parse and store it as they would a
// real note.
const benchNote = "Patient is a 58 year old presenting with intermittent chest pain radiating to the left arm, " +
	"onset about two hours prior to arrival. Vital signs stable on admission; afebrile. ECG shows normal " +
	"sinus rhythm without acute ST changes. Initial troponin within normal limits, repeat in three hours. " +
	"History of hypertension and hyperlipidaemia, on lisinopril and atorvastatin. No known drug allergies " +
	"other than penicillin (hives). Plan: admit to telemetry for observation, serial cardiac enzymes, " +
	"aspirin given in the emergency department, cardiology consult in the morning. Patient and family " +
	"informed of the plan of care and in agreement. "

// benchNoteChunk is the most text one OBX carries.
const benchNoteChunk = 200

// newBenchTemplate builds the ADT^A01 of run, timestamped at, padded with
// OBX notes to about size bytes (when size exceeds the plain message).
func newBenchTemplate(run string, at time.Time, size int) *benchTemplate {
	ts := at.Format("20060102150405")
	lane, seq := string(holeLane), string(holeSeq)
	pv1 := make([]string, 45)
	pv1[0], pv1[1], pv1[2], pv1[3], pv1[4] = "PV1", "1", "I", "4W^401^B^GENHOSP", "E"
	pv1[7] = "1234567890^SMITH^JOHN^A^^DR^^^NPI"
	pv1[10], pv1[14] = "MED", "7"
	pv1[17], pv1[18] = pv1[7], "IP"
	pv1[19] = seq + "^^^" + run + "^VN" // the sink reads PV1-19.1 and PV1-19.4
	pv1[44] = ts
	var msg strings.Builder
	msg.WriteString("MSH|^~\\&|MFBENCH|BENCH|MF|GENHOSP|" + ts + "||ADT^A01^ADT_A01|" + run + "-" + lane + "-" + seq + "|P|2.5.1\r")
	msg.WriteString("EVN|A01|" + ts + "\r")
	msg.WriteString("PID|1||" + lane + "^^^GENHOSP^MR||DOE^JANE^Q||19800101|F|||123 MAIN ST^^SPRINGFIELD^IL^62701^USA||(217)555-0123|||M||" + lane + "-V1\r")
	msg.WriteString("NK1|1|DOE^JOHN^R|SPO^Spouse^HL70063|123 MAIN ST^^SPRINGFIELD^IL^62701^USA|(217)555-0124\r")
	msg.WriteString(strings.Join(pv1, "|") + "\r")
	msg.WriteString("AL1|1|DA|70618^Penicillin^RXNORM|SV|HIVES\r")
	msg.WriteString("DG1|1||R07.9^Chest pain, unspecified^I10||" + ts + "|A\r")

	// The holes are one byte in the template and more in a message: aim the
	// padding at the size of a sample message. The OBX segments hold no
	// hole, so the sample grows by what is appended (counting the holes of
	// the whole message again for each segment took seconds for a few
	// megabytes).
	sample := msg.Len() + strings.Count(msg.String(), lane)*(len(laneID(0))-1) + strings.Count(msg.String(), seq)*(len("1")-1)
	note := 0
	for n := 1; ; n++ {
		head := "OBX|" + strconv.Itoa(n) + "|TX|11506-3^Progress note^LN|1|"
		const tail = "||||||F\r"
		room := size - sample - len(head) - len(tail)
		if room < 1 {
			break
		}
		text := make([]byte, 0, min(room, benchNoteChunk))
		for len(text) < cap(text) {
			k := min(cap(text)-len(text), len(benchNote)-note)
			text = append(text, benchNote[note:note+k]...)
			note = (note + k) % len(benchNote)
		}
		obx := head + strings.TrimSpace(string(text)) + tail
		msg.WriteString(obx)
		sample += len(obx)
	}

	t := &benchTemplate{run: run, ctl: []byte(run + "-")}
	frame := string(hl7.StartBlock) + msg.String() + string([]byte{hl7.EndBlock, hl7.CarriageReturn})
	for {
		i := strings.IndexAny(frame, lane+seq)
		if i < 0 {
			t.chunks = append(t.chunks, []byte(frame))
			break
		}
		t.chunks = append(t.chunks, []byte(frame[:i]))
		t.holes = append(t.holes, frame[i])
		frame = frame[i+1:]
	}
	t.size = len(t.appendFrame(nil, []byte(laneID(0)), []byte("1"))) - 3 // without the block characters
	return t
}

// appendFrame appends the framed message of lane with sequence number seq.
func (t *benchTemplate) appendFrame(dst, lane, seq []byte) []byte {
	for i, c := range t.chunks {
		dst = append(dst, c...)
		if i < len(t.holes) {
			if t.holes[i] == holeLane {
				dst = append(dst, lane...)
			} else {
				dst = append(dst, seq...)
			}
		}
	}
	return dst
}

// isControlID reports whether ctl is the MSH-10 of lane's message seq:
// <run>-<lane>-<seq>.
func (t *benchTemplate) isControlID(ctl, lane, seq []byte) bool {
	return len(ctl) == len(t.ctl)+len(lane)+1+len(seq) &&
		bytes.HasPrefix(ctl, t.ctl) &&
		bytes.Equal(ctl[len(t.ctl):len(t.ctl)+len(lane)], lane) &&
		ctl[len(t.ctl)+len(lane)] == '-' &&
		bytes.Equal(ctl[len(t.ctl)+len(lane)+1:], seq)
}

// latencyHistogram records durations in log-linear buckets, as
// HdrHistogram does: values below 256 ns each have their own bucket; above,
// every power of two is split into 128 equal buckets, so a bucket is at most
// 1/128 of its lower bound wide and a percentile, read as its bucket's
// midpoint, is within 0.4% of the exact value. Recording is a few
// instructions and no allocation; merging adds the counts. The maximum is
// kept exactly.
type latencyHistogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    time.Duration
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits // buckets per power of two
	// histBuckets covers every non-negative int64: the largest index is
	// (63-histSubBits)*histSub + 2*histSub - 1.
	histBuckets = (63-histSubBits)*histSub + 2*histSub
)

func histIndex(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1 // v>>shift is in [histSub, 2*histSub)
	return shift*histSub + int(v>>shift)
}

// histBucket returns the lowest value of bucket i and the bucket's width.
func histBucket(i int) (low, width uint64) {
	if i < 2*histSub {
		return uint64(i), 1
	}
	shift := i/histSub - 1
	return uint64(i-shift*histSub) << shift, 1 << shift
}

func (h *latencyHistogram) record(d time.Duration) {
	d = max(d, 0)
	h.counts[histIndex(uint64(d))]++
	h.n++
	h.max = max(h.max, d)
}

func (h *latencyHistogram) merge(o *latencyHistogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile (0 < q <= 1) of the recorded durations,
// 0 when none was recorded.
func (h *latencyHistogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	if rank >= h.n {
		return h.max
	}
	var cum uint64
	for i, c := range h.counts {
		if cum += c; cum >= rank {
			low, width := histBucket(i)
			return min(time.Duration(low+(width-1)/2), h.max)
		}
	}
	return h.max
}

// clientTLSFlags are the TLS flags of the commands that connect to an MLLP
// listener: mf send and mf bench.
func clientTLSFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "tls", Usage: "connect with TLS"},
		&cli.StringFlag{Name: "tls-ca", Usage: "PEM file of the CA that signed the listener's certificate"},
		&cli.StringFlag{Name: "tls-cert", Usage: "PEM client certificate (mutual TLS)"},
		&cli.StringFlag{Name: "tls-key", Usage: "PEM client key (mutual TLS)"},
		&cli.StringFlag{Name: "server-name", Usage: "name to verify in the listener's certificate"},
	}
}

// withClientTLS returns o with its TLS fields set from the clientTLSFlags.
func withClientTLS(c *cli.Context, o config.Outbound) config.Outbound {
	o.TLS, o.TLSCA, o.TLSCert, o.TLSKey, o.ServerName =
		c.Bool("tls"), c.String("tls-ca"), c.String("tls-cert"), c.String("tls-key"), c.String("server-name")
	return o
}

// clientTLSConfig is the client TLS configuration of o's TLS fields, or nil
// without TLS; TLS settings without --tls are refused rather than ignored.
func clientTLSConfig(o config.Outbound) (*tls.Config, error) {
	if !o.TLS {
		if o.TLSCA != "" || o.TLSCert != "" || o.TLSKey != "" || o.ServerName != "" {
			return nil, errors.New("--tls-ca, --tls-cert, --tls-key and --server-name need --tls (refusing to send in plaintext)")
		}
		return nil, nil
	}
	// The MLLP sender's rules, its errors said in the flags' words: they
	// name an outbound's config keys.
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together (the client certificate and its key)")
	}
	cfg, err := lanes.OutboundTLSConfig(o)
	if err != nil {
		msg := err.Error()
		if rest, ok := strings.CutPrefix(msg, "tls_ca: "); ok {
			msg = "--tls-ca: " + rest
		} else if rest, ok := strings.CutPrefix(msg, "tls_cert/tls_key: "); ok {
			msg = "--tls-cert/--tls-key: " + rest
		}
		return nil, errors.New(msg)
	}
	return cfg, nil
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

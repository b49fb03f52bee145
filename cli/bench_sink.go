package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/hl7"
)

const benchSinkDescription = `mf bench sink is an MLLP destination that acknowledges every well-formed message
with AA and checks what arrives. Per lane (PID-3.1, within the run named in PV1-19.4)
it records the sequence numbers (PV1-19.1) in arrival order, as mf bench writes them,
and reports:
  received     well-formed messages
  unique       first arrivals of a (run, lane, sequence number)
  duplicates   arrivals of a message already received
  reordered    first arrivals of a sequence number lower than one already received on its lane
  unchecked    well-formed messages without a lane or a sequence number (acknowledged, not checked)
  malformed    frames that are not HL7 (answered AR) or break MLLP framing (answered AR, then closed)
  lanes        distinct (run, lane)
and the arrival rate from the first arrival to the last.

It stops at SIGINT or SIGTERM, or with --expect N once N unique messages have arrived,
and prints the report. It exits non-zero if a message arrived twice, out of order or
malformed, or if --timeout ran out before --expect was reached.

--json prints one object: listen, received, unique, duplicates, reordered, unchecked,
malformed, lanes, elapsed_seconds (first arrival to last), rate_per_second,
last_arrival_unix (Unix seconds, to the microsecond; 0 before any), and expect when
given.`

// sinkMaxFrameBytes bounds a frame the sink reads.
const sinkMaxFrameBytes = 16 << 20

func benchSinkCommand() *cli.Command {
	return &cli.Command{
		Name:        "sink",
		Usage:       "an MLLP destination that acknowledges and checks what mf bench sends",
		Description: benchSinkDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:2576", Usage: "address to listen on, host:port"},
			&cli.Int64Flag{Name: "expect", Usage: "stop once this many unique messages have arrived"},
			&cli.DurationFlag{Name: "timeout", Usage: "stop after this long; fail if --expect was not reached"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object at the end"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("bench sink: unexpected argument %q", c.Args().First())
			}
			expect, timeout := c.Int64("expect"), c.Duration("timeout")
			if expect < 0 {
				return fmt.Errorf("bench sink: --expect %d: want a number of messages", expect)
			}
			if timeout < 0 {
				return fmt.Errorf("bench sink: --timeout %s: want a positive duration", timeout)
			}
			// net.Listen takes "" for every interface at any port: an
			// unset shell variable, not a sink an engine would find.
			if _, _, err := net.SplitHostPort(c.String("listen")); err != nil {
				return fmt.Errorf("bench sink: --listen %q: want host:port (\":2576\" listens on every interface)", c.String("listen"))
			}
			s, err := listenSink(c.String("listen"), expect)
			if err != nil {
				return fmt.Errorf("bench sink: %w", err)
			}
			fmt.Fprintf(c.App.ErrWriter, "mf bench sink: listening on %s\n", s.Addr())
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			rep := s.run(ctx)
			if c.Bool("json") {
				b, err := json.Marshal(rep)
				if err != nil {
					return err
				}
				fmt.Fprintln(c.App.Writer, string(b))
			} else {
				rep.print(c.App.Writer)
			}
			return rep.failure()
		},
	}
}

// sink is the MLLP destination of mf bench sink. Each connection has its
// goroutine; what they record goes through mu, the sink's only lock.
type sink struct {
	ln      net.Listener
	expect  int64
	reached chan struct{} // closed once expect unique messages are acknowledged
	once    sync.Once

	mu    sync.Mutex
	lanes map[string]*sinkLane // by run, NUL, lane
	tally sinkReport
	first time.Time
	last  time.Time
}

// sinkReport is what the sink prints, and with --json its one object.
type sinkReport struct {
	Listen     string `json:"listen"`
	Received   int64  `json:"received"`
	Unique     int64  `json:"unique"`
	Duplicates int64  `json:"duplicates"`
	Reordered  int64  `json:"reordered"`
	Unchecked  int64  `json:"unchecked"`
	Malformed  int64  `json:"malformed"`
	Lanes      int    `json:"lanes"`
	// ElapsedSeconds runs from the first arrival to the last.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	RatePerSecond  float64 `json:"rate_per_second"`
	// LastArrivalUnix is when the last message arrived (Unix seconds,
	// microseconds; 0 before any): with mf bench's StartedUnix it times a
	// run from its first send to its last delivery.
	LastArrivalUnix float64 `json:"last_arrival_unix"`
	Expect          int64   `json:"expect,omitempty"`
}

// listenSink listens on addr; expect, when positive, is the number of
// unique messages after which run returns.
func listenSink(addr string, expect int64) (*sink, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &sink{ln: ln, expect: expect, reached: make(chan struct{}), lanes: make(map[string]*sinkLane)}, nil
}

// Addr is the address the sink listens on.
func (s *sink) Addr() net.Addr { return s.ln.Addr() }

// run serves until ctx is done or the expected messages have arrived, then
// stops and returns the report. A message being handled when it stops is
// still acknowledged: the stop interrupts only reads.
func (s *sink) run(ctx context.Context) sinkReport {
	stopping, stop := context.WithCancel(context.Background())
	var conns sync.WaitGroup
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			nc, err := s.ln.Accept()
			if err != nil {
				return // the listener is closed
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				s.serve(stopping, nc)
			}()
		}
	}()
	select {
	case <-ctx.Done():
	case <-s.reached:
	}
	_ = s.ln.Close()
	<-accepted // no conns.Add after this
	stop()
	conns.Wait()
	return s.report()
}

// serve reads the frames of one connection and answers each.
func (s *sink) serve(stopping context.Context, nc net.Conn) {
	defer nc.Close()
	// A read deadline in the past interrupts the read in progress and every
	// later one, not a write: the ACK in hand still goes out.
	defer context.AfterFunc(stopping, func() { _ = nc.SetReadDeadline(time.Unix(1, 0)) })()
	fr := hl7.NewFrameReader(nc, sinkMaxFrameBytes)
	var out, key []byte
	for {
		payload, err := fr.ReadFrame()
		switch {
		case err == nil:
		case errors.Is(err, hl7.ErrNotFramed), errors.Is(err, hl7.ErrFrameTooLarge):
			// The stream cannot be resynchronised: NAK and close.
			s.countMalformed()
			out, _ = hl7.AppendFrame(out[:0], hl7.NakUnparsableCondition(hl7.ConditionOf(err), err.Error()))
			_ = nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
			_, _ = nc.Write(out)
			return
		case errors.Is(err, io.ErrUnexpectedEOF):
			s.countMalformed() // cut inside a frame
			return
		default:
			return // EOF, or stopping
		}
		now := time.Now()
		var ack []byte
		reached := false
		if m, err := hl7.Parse(payload); err != nil {
			s.countMalformed()
			ack = hl7.NakUnparsableCondition(hl7.ConditionOf(err), err.Error())
		} else {
			key, reached = s.record(m, now, key)
			ack = hl7.Ack(m, hl7.AcceptCode(m, hl7.Accept), "")
		}
		out, _ = hl7.AppendFrame(out[:0], ack) // an ACK never holds a block character
		if _, err := nc.Write(out); err != nil {
			return
		}
		if reached {
			s.once.Do(func() { close(s.reached) })
		}
	}
}

var (
	pathLane = hl7.Path{Segment: "PID", Field: 3, Component: 1}
	pathSeq  = hl7.Path{Segment: "PV1", Field: 19, Component: 1}
	pathRun  = hl7.Path{Segment: "PV1", Field: 19, Component: 4}
)

// record checks and counts message m, arrived at now; key is a scratch
// buffer, returned for reuse. It reports whether m brought the unique count
// to the expected one.
func (s *sink) record(m *hl7.Message, now time.Time, key []byte) ([]byte, bool) {
	lane := m.Get(pathLane)
	seq, err := strconv.ParseUint(m.Get(pathSeq), 10, 64)
	checked := lane != "" && err == nil && seq > 0
	if checked {
		key = append(append(append(key[:0], m.Get(pathRun)...), 0), lane...)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() {
		s.first = now
	}
	if now.After(s.last) {
		s.last = now
	}
	s.tally.Received++
	if !checked {
		s.tally.Unchecked++
		return key, false
	}
	l := s.lanes[string(key)]
	if l == nil {
		l = new(sinkLane)
		s.lanes[string(key)] = l
	}
	switch l.add(seq) {
	case arrivalDuplicate:
		s.tally.Duplicates++
		return key, false
	case arrivalReordered:
		s.tally.Reordered++
	}
	s.tally.Unique++
	return key, s.expect > 0 && s.tally.Unique == s.expect
}

func (s *sink) countMalformed() {
	s.mu.Lock()
	s.tally.Malformed++
	s.mu.Unlock()
}

func (s *sink) report() sinkReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.tally
	r.Listen, r.Lanes, r.Expect = s.ln.Addr().String(), len(s.lanes), s.expect
	if !s.last.IsZero() {
		r.LastArrivalUnix = unixSeconds(s.last)
	}
	if span := s.last.Sub(s.first); span > 0 {
		r.ElapsedSeconds = span.Seconds()
		r.RatePerSecond = float64(r.Received-1) / span.Seconds() // intervals between arrivals
	}
	return r
}

func (r sinkReport) print(w io.Writer) {
	fmt.Fprintf(w, "received %d: unique %d, duplicates %d, reordered %d, unchecked %d; malformed %d; lanes %d\n",
		r.Received, r.Unique, r.Duplicates, r.Reordered, r.Unchecked, r.Malformed, r.Lanes)
	fmt.Fprintf(w, "arrivals over %.2fs: %.0f msg/s\n", r.ElapsedSeconds, r.RatePerSecond)
}

// failure says what the report shows went wrong, or returns nil.
func (r sinkReport) failure() error {
	var problems []string
	if r.Expect > 0 && r.Unique < r.Expect {
		problems = append(problems, fmt.Sprintf("%d of %d expected messages arrived", r.Unique, r.Expect))
	}
	if r.Duplicates > 0 {
		problems = append(problems, fmt.Sprintf("%d duplicates", r.Duplicates))
	}
	if r.Reordered > 0 {
		problems = append(problems, fmt.Sprintf("%d reordered", r.Reordered))
	}
	if r.Malformed > 0 {
		problems = append(problems, fmt.Sprintf("%d malformed", r.Malformed))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("bench sink: %s", strings.Join(problems, ", "))
}

// Kinds of arrival of a sequence number on a lane.
const (
	arrivalInOrder = iota
	arrivalReordered
	arrivalDuplicate
)

// sinkDenseMax bounds the sequence numbers a lane keeps in its bitmap
// (2 MiB at most); larger ones, which mf bench reaches only after 16 million
// messages on one lane, go to a map.
const sinkDenseMax = 1 << 24

// sinkLane is what the sink knows of one lane: the highest sequence number
// seen and the set of those seen.
type sinkLane struct {
	max    uint64
	dense  []uint64 // bit n: sequence number n has arrived
	sparse map[uint64]struct{}
}

// add records the arrival of seq and says how it arrived.
func (l *sinkLane) add(seq uint64) int {
	if seq < sinkDenseMax {
		w, bit := int(seq/64), uint64(1)<<(seq%64)
		if w >= len(l.dense) {
			l.dense = append(l.dense, make([]uint64, w+1-len(l.dense))...)
		}
		if l.dense[w]&bit != 0 {
			return arrivalDuplicate
		}
		l.dense[w] |= bit
	} else {
		if _, ok := l.sparse[seq]; ok {
			return arrivalDuplicate
		}
		if l.sparse == nil {
			l.sparse = make(map[uint64]struct{})
		}
		l.sparse[seq] = struct{}{}
	}
	if seq < l.max {
		return arrivalReordered
	}
	l.max = seq
	return arrivalInOrder
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/listeners"
)

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "send the HL7 messages of files over MLLP and print each ACK",
		ArgsUsage: "FILE... (- reads the standard input)",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "to", Value: "127.0.0.1:2575", Usage: "MLLP listener address host:port"},
			&cli.IntFlag{Name: "connections", Value: 1, Usage: "connections to send over in parallel"},
			&cli.IntFlag{Name: "repeat", Value: 1, Usage: "send the messages this many times"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only the summary"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "wait this long for each ACK"},
		}, clientTLSFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return errors.New("send: name at least one file of HL7 messages")
			}
			// Refused rather than taken for 1 (or, for --timeout, every
			// send failing at once): the operator asked for something else.
			for _, name := range []string{"connections", "repeat"} {
				if n := c.Int(name); n < 1 {
					return fmt.Errorf("send: --%s %d: want at least 1", name, n)
				}
			}
			// The sender makes room for each connection at once.
			if n := c.Int("connections"); n > config.MaxOutboundConnections {
				return fmt.Errorf("send: --connections %d: want at most %d", n, config.MaxOutboundConnections)
			}
			if d := c.Duration("timeout"); d <= 0 {
				return fmt.Errorf("send: --timeout %v: must be positive (how long to wait for each ACK)", d)
			}
			if err := config.CheckHostPort(c.String("to"), false); err != nil {
				return fmt.Errorf("send: --to: %w", err)
			}
			conns := c.Int("connections")
			o := withClientTLS(c, config.Outbound{
				Name: "send", Type: config.OutboundMLLP, Address: c.String("to"), Connections: conns,
				TimeoutSeconds: c.Duration("timeout").Seconds(), RetryBaseSeconds: 0.1, RetryMaxSeconds: 1,
			})
			// Said in the flags' words, as mf bench does: the sender's own
			// check names config keys of an outbound "send".
			if _, err := clientTLSConfig(o); err != nil {
				return fmt.Errorf("send: %w", err)
			}
			var msgs [][]byte
			for _, f := range c.Args().Slice() {
				var b []byte
				var err error
				if f == "-" {
					b, err = io.ReadAll(c.App.Reader) // the standard input
				} else {
					b, err = os.ReadFile(f)
				}
				if err != nil && strings.HasPrefix(f, "-") && f != "-" {
					// urfave/cli stops at the first file: a flag after it
					// is taken for a file name, one that names no file.
					return fmt.Errorf("send: %q is a flag after the files: flags go before them (mf send --to HOST:PORT FILE...)", f)
				}
				if err != nil {
					return fmt.Errorf("send: %w", err)
				}
				split := listeners.SplitMessages(b)
				// Likely the wrong file: sending the others and exiting 0
				// would let a script take it for sent.
				if len(split) == 0 {
					return fmt.Errorf("send: %s holds no HL7 message (it is empty, holds only blank lines, or is a batch of no message)", f)
				}
				msgs = append(msgs, split...)
			}
			// The count of sends is an int: past it, it wrapped negative and
			// nothing was sent, with exit 0.
			if r := c.Int("repeat"); r > math.MaxInt/len(msgs) {
				return fmt.Errorf("send: --repeat %d: at most %d for %d messages", r, math.MaxInt/len(msgs), len(msgs))
			}
			sender, err := lanes.NewSender(o)
			if err != nil {
				return fmt.Errorf("send: %w", err)
			}
			defer sender.Close()
			return send(c, sender, msgs, conns, c.Int("repeat"))
		},
	}
}

// send sends every message repeat times over conns workers and prints each
// outcome and a summary; it fails if any message was not accepted.
func send(c *cli.Context, sender lanes.Sender, msgs [][]byte, conns, repeat int) error {
	total := len(msgs) * repeat
	var next, accepted, unacked, failed atomic.Int64
	var out sync.Mutex
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				payload := msgs[i%len(msgs)]
				controlID, ackType := "", ""
				if m, err := hl7.Parse(payload); err == nil {
					controlID = m.ControlID()
					// MSH-15 NE or ER: the receiver sends no ACK when it
					// accepts, and on one connection the sender does not
					// wait for one (on more it waits, for the order's
					// sake): sent is all that is known.
					if conns == 1 && !hl7.ShouldAck(m, hl7.AcceptCode(m, hl7.Accept)) {
						ackType = m.AcceptAckType()
					}
				}
				ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
				err := sender.Send(ctx, lanes.Outgoing{QueueID: int64(i + 1), ControlID: controlID, Payload: payload})
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
				case ackType != "":
					unacked.Add(1)
				default:
					accepted.Add(1)
				}
				// A message without a control id (none, only blanks, or not
				// HL7) is named by its place alone, and said to have none.
				label := controlID
				if strings.TrimSpace(controlID) == "" {
					label = "(no control id)"
				}
				if !c.Bool("quiet") || err != nil {
					out.Lock()
					if err == nil && ackType != "" {
						fmt.Fprintf(c.App.Writer, "%d %s: sent, no ACK awaited (MSH-15 %s: the receiver answers only a refusal, or nothing), so not known to be accepted\n", i+1, label, ackType)
					} else if err == nil {
						fmt.Fprintf(c.App.Writer, "%d %s: accepted\n", i+1, label)
					} else {
						fmt.Fprintf(c.App.Writer, "%d %s: %v\n", i+1, label, err)
					}
					out.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	// The rate is of the messages accepted: one that failed (a target that
	// refused the connection, say) was not delivered at any rate.
	fmt.Fprintf(c.App.Writer, "sent %d messages over %d connections in %.2fs: %.0f msg/s accepted; accepted %d, not accepted %d",
		total, conns, took.Seconds(), float64(accepted.Load())/took.Seconds(), accepted.Load(), failed.Load())
	if n := unacked.Load(); n > 0 {
		fmt.Fprintf(c.App.Writer, ", sent without an ACK (MSH-15 NE or ER) %d", n)
	}
	fmt.Fprintln(c.App.Writer)
	if failed.Load() > 0 {
		return fmt.Errorf("send: %d of %d messages were not accepted", failed.Load(), total)
	}
	return nil
}

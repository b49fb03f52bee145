package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/api"
)

// searchParams are GET /messages' parameters, which mf messages takes as
// flags of the same names with - for _.
var searchParams = []string{"control_id", "inbound", "status", "since", "until", "limit", "before_id"}

// base64Line is how many characters of a payload's base64 mf message
// prints a line, as base64(1) does.
const base64Line = 76

func messagesCommand() *cli.Command {
	return &cli.Command{
		Name:  "messages",
		Usage: "search the stored messages: a page of their metadata, newest first (GET /messages)",
		Flags: append(apiFlags(),
			&cli.StringFlag{Name: "control-id", Usage: "only the messages of this control id (MSH-10, exactly)"},
			&cli.StringFlag{Name: "inbound", Usage: "only the messages of this inbound"},
			&cli.StringFlag{Name: "status", Usage: "only the messages of this status: routed, unrouted or rejected"},
			&cli.StringFlag{Name: "since", Usage: "only the messages received at or after this RFC 3339 time (default: 24 hours before --until, or now)"},
			&cli.StringFlag{Name: "until", Usage: "only the messages received before this RFC 3339 time"},
			&cli.StringFlag{Name: "limit", Usage: "messages on the page, 1 to " + strconv.Itoa(api.MaxSearchLimit) + " (default " + strconv.Itoa(api.DefaultSearchLimit) + ")"},
			&cli.StringFlag{Name: "before-id", Usage: "the page after the one that ended with this id (its next_before_id)"},
		),
		Action: func(c *cli.Context) error {
			body, _, err := getAPI(c, "/messages"+flagQuery(c, searchParams...), "operator")
			if err != nil || c.Bool("json") {
				return printed(c, body, err)
			}
			var page api.MessageList
			if err := json.Unmarshal(body, &page); err != nil {
				return fmt.Errorf("mf messages: the API's answer is not a page of messages (%v): %.200s", err, body)
			}
			w := c.App.Writer
			if len(page.Messages) == 0 && !c.IsSet("before-id") {
				until := "now"
				if page.Until != nil {
					until = *page.Until
				}
				_, err := fmt.Fprintf(w, "no message found received from %s to %s\n", page.Since, until)
				return err
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tRECEIVED (UTC)\tINBOUND\tCONTROL ID\tTYPE\tSTATUS\tQUEUE")
			for _, m := range page.Messages {
				queue := make([]string, 0, len(m.Queue))
				for _, q := range m.Queue {
					dest := printable(q.Destination)
					if strings.ContainsAny(q.Destination, " :") {
						dest = strconv.Quote(q.Destination) // one word of the column, whose : ends it
					}
					queue = append(queue, dest+":"+q.Status)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, apiTime(m.ReceivedAt, "2006-01-02 15:04:05"), cell(m.Inbound),
					cell(m.ControlID), cell(m.MessageType), cell(m.Status), cell(strings.Join(queue, " ")))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.NextBeforeID == nil {
				_, err := fmt.Fprintln(w, "\nlast page")
				return err
			}
			// The same filters, and the window the API searched: without
			// --since it is the 24 hours before now, which moves.
			var args []string
			for _, f := range []string{"control-id", "inbound", "status", "limit"} {
				if c.IsSet(f) {
					args = append(args, "--"+f, shellWord(c.String(f)))
				}
			}
			args = append(args, "--since", shellWord(page.Since))
			if page.Until != nil {
				args = append(args, "--until", shellWord(*page.Until))
			}
			args = append(args, "--before-id", strconv.FormatInt(*page.NextBeforeID, 10))
			_, err = fmt.Fprintf(w, "\nmore messages: %s\n", nextPageCommand(c, args...))
			return err
		},
	}
}

func messageCommand() *cli.Command {
	return &cli.Command{
		Name:      "message",
		Usage:     "show a stored message, its queue rows and its payload, which is PHI (GET /messages/{id})",
		ArgsUsage: "MESSAGE_ID",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			id, err := messageIDArg(c, "read one at a time")
			if err != nil {
				return err
			}
			body, _, err := callAPI(c, http.MethodGet, "/messages/"+id, "operator")
			if err != nil || c.Bool("json") {
				return printed(c, body, err)
			}
			var m api.Message
			if err := json.Unmarshal(body, &m); err != nil {
				return fmt.Errorf("mf message: the API's answer is not a message (%v): %.200s", err, body)
			}
			return printMessage(c.App.Writer, m)
		},
	}
}

// printMessage prints m: its metadata, its queue rows, its payload.
func printMessage(w io.Writer, m api.Message) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "message %d\nreceived\t%s UTC\ninbound\t%s\ncontrol id\t%s\ntype\t%s\nstatus\t%s\n", m.ID,
		apiTime(m.ReceivedAt, "2006-01-02 15:04:05.000"), cell(m.Inbound), cell(m.ControlID), cell(m.MessageType), cell(m.Status))
	if m.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", printable(m.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(m.Queue) == 0 {
		fmt.Fprintln(w, "\nno queue row (never queued: unrouted or rejected; or purged after [store] retention_days)")
	} else {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "QUEUE ID\tDESTINATION\tLANE\tSTATUS\tHELD\tATTEMPTS\tNEXT ATTEMPT (UTC)\tRESENT AS\tLAST ERROR")
		for _, q := range m.Queue {
			held, resentAs := "-", "-"
			if q.Held {
				held = "held"
			}
			if q.ResentAs != nil {
				resentAs = strconv.FormatInt(*q.ResentAs, 10)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", q.ID, cell(q.Destination), cell(q.Lane), q.Status, held, q.Attempts,
				apiTime(q.NextAttemptAt, "2006-01-02 15:04:05"), resentAs, cell(q.LastError))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if m.PayloadBase64 != nil {
		// Payload has U+FFFD for each byte that is not UTF-8: printed, it
		// would look like the message and not be it.
		raw, err := base64.StdEncoding.DecodeString(*m.PayloadBase64)
		if err != nil {
			return fmt.Errorf("mf message: the API's payload_base64 does not decode: %v", err)
		}
		fmt.Fprintf(w, "\npayload (%d bytes) is not UTF-8 (HL7 v2 in Latin-1 or another 8-bit character set, see MSH-18), so it is shown exactly, in base64 (base64 -d decodes it; its segments end with CR):\n", len(raw))
		b := *m.PayloadBase64
		for len(b) > base64Line {
			fmt.Fprintln(w, b[:base64Line])
			b = b[base64Line:]
		}
		_, err = fmt.Fprintln(w, b)
		return err
	}
	_, err := fmt.Fprintf(w, "\npayload:\n%s", segments(m.Payload))
	return err
}

// segments is an HL7 payload a segment a line: HL7 ends each with CR (a
// terminal returns to the line's start and overwrites it), some senders
// with CR LF or LF. Any other control character (an MLLP frame byte, an
// escape sequence that would drive the terminal) is shown as \xNN; a tab
// is kept.
func segments(payload string) string {
	var b strings.Builder
	payload = strings.ReplaceAll(payload, "\r\n", "\n")
	for _, r := range payload {
		switch {
		case r == '\r' || r == '\n':
			b.WriteByte('\n')
		case r == '\t' || !unicode.IsControl(r):
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, `\x%02x`, r) // C0, DEL and C1 are all below 0x100
		}
	}
	if s := b.String(); s != "" && !strings.HasSuffix(s, "\n") {
		b.WriteByte('\n')
	}
	return b.String()
}

func resendCommand() *cli.Command {
	return &cli.Command{
		Name:      "resend",
		Usage:     "queue a stored message again, at the tail of its lanes (POST /messages/{id}/resend)",
		ArgsUsage: "MESSAGE_ID",
		Flags: append(apiFlags(),
			&cli.StringFlag{Name: "destination", Usage: "only to this one of its destinations (default: each it was queued for)"},
		),
		Action: func(c *cli.Context) error {
			id, err := messageIDArg(c, "resend one at a time")
			if err != nil {
				return err
			}
			body, _, err := callAPI(c, http.MethodPost, "/messages/"+id+"/resend"+flagQuery(c, "destination"), "operator")
			if err != nil || c.Bool("json") {
				return printed(c, body, err)
			}
			var r api.Resent
			if err := json.Unmarshal(body, &r); err != nil {
				return fmt.Errorf("mf resend: the API's answer is not a resend's (%v): %.200s", err, body)
			}
			rows := make([]string, 0, len(r.Queue))
			for _, q := range r.Queue {
				rows = append(rows, fmt.Sprintf("new queue id %d for outbound %q", q.ID, q.Destination))
			}
			tail := ", at the tail of the lane the routes in force give it"
			if len(rows) > 1 {
				tail = ", each at the tail of the lane the routes in force give it"
			}
			_, err = fmt.Fprintf(c.App.Writer, "message %d queued again: %s%s\n", r.MessageID, strings.Join(rows, ", "), tail)
			return err
		},
	}
}

// messageIDArg is the command's one argument, the id of a stored message;
// one is how the command takes several.
func messageIDArg(c *cli.Context, one string) (string, error) {
	return idArg(c, argument{What: "message id", Value: "the message id", Needs: "the id of a message", Usage: "MESSAGE_ID", One: one},
		"give the ID mf messages lists")
}

// idArg is the command's one argument a, the id of a stored message or
// queue row, refused before any request when it is not a positive integer
// (digits only, as the API takes it: "+5" is no id); find says where the
// operator finds one.
func idArg(c *cli.Context, a argument, find string) (string, error) {
	id, err := oneArg(c, a)
	if err != nil {
		return "", err
	}
	if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 || strings.TrimLeft(id, "0123456789") != "" {
		return "", fmt.Errorf("mf %s: %s %q is not a positive integer (at most %d): %s", c.Command.Name, a.What, id, int64(math.MaxInt64), find)
	}
	return id, nil
}

// apiTime is an API time (epoch seconds), in UTC in layout, or "-".
func apiTime(t *float64, layout string) string {
	if t == nil {
		return "-"
	}
	return epochTime(*t).UTC().Format(layout)
}

// cell is a value of a table's column: printable, "-" when empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return printable(s)
}

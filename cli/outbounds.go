package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/api"
)

func holdCommand() *cli.Command {
	return &cli.Command{
		Name:      "hold",
		Usage:     "hold an outbound: its lanes send nothing until mf release (POST /outbounds/{name}/hold)",
		ArgsUsage: "OUTBOUND",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			h, body, err := postOutbound(c, "hold")
			if err != nil || c.Bool("json") {
				return printed(c, body, err)
			}
			since := ""
			if h.Since != nil {
				since = " since " + epochTime(*h.Since).UTC().Format("2006-01-02 15:04:05 UTC")
			}
			fmt.Fprintf(c.App.Writer, "outbound %q held%s: its lanes send nothing until mf release %s (its messages are still acknowledged, stored and queued)\n",
				h.Outbound, since, shellWord(h.Outbound))
			return nil
		},
	}
}

func releaseCommand() *cli.Command {
	return &cli.Command{
		Name:      "release",
		Usage:     "release a held outbound: its lanes resume from their heads (POST /outbounds/{name}/release)",
		ArgsUsage: "OUTBOUND",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			h, body, err := postOutbound(c, "release")
			if err != nil || c.Bool("json") {
				return printed(c, body, err)
			}
			fmt.Fprintf(c.App.Writer, "outbound %q released: it is not held now, and its lanes deliver from their heads, in order\n", h.Outbound)
			return nil
		},
	}
}

func resendDeadCommand() *cli.Command {
	return &cli.Command{
		Name:      "resend-dead",
		Usage:     "queue an outbound's dead rows again, each once, in order (POST /outbounds/{name}/resend-dead)",
		ArgsUsage: "OUTBOUND",
		Flags: append(apiFlags(),
			&cli.StringFlag{Name: "since", Usage: "only rows set aside at or after this RFC 3339 time"},
			&cli.StringFlag{Name: "until", Usage: "only rows set aside before this RFC 3339 time"},
			&cli.StringFlag{Name: "limit", Usage: "resend at most this many, the oldest first (1 to 1000000)"},
		),
		Action: func(c *cli.Context) error {
			name, err := outboundArg(c, "resend one outbound's at a time")
			if err != nil {
				return err
			}
			path := "/outbounds/" + neturl.PathEscape(name) + "/resend-dead" + flagQuery(c, "since", "until", "limit")
			body, _, err := callAPI(c, http.MethodPost, path, "operator")
			if err != nil || c.Bool("json") {
				return printed(c, body, err)
			}
			var r api.ResentDead
			if err := json.Unmarshal(body, &r); err != nil {
				return fmt.Errorf("mf resend-dead: the API's answer is not a resend-dead's (%v): %.200s", err, body)
			}
			line := fmt.Sprintf("no dead row of outbound %q was left to resend (each is resent once)", r.Outbound)
			if r.Resent == 1 && r.FirstID != nil {
				line = fmt.Sprintf("1 dead row of outbound %q queued again, new queue id %d, at the tail of the lane the routes in force give it", r.Outbound, *r.FirstID)
			} else if r.Resent > 0 && r.FirstID != nil && r.LastID != nil {
				line = fmt.Sprintf("%d dead rows of outbound %q queued again, new queue ids %d to %d, each at the tail of the lane the routes in force give it",
					r.Resent, r.Outbound, *r.FirstID, *r.LastID)
			} else if r.NotRouted+r.Unparsable > 0 {
				line = fmt.Sprintf("no dead row of outbound %q was resent", r.Outbound)
			}
			if r.NotRouted > 0 {
				line += fmt.Sprintf("; %d left dead: no route in force sends their messages to %q (restore the route, and reload, to resend them)", r.NotRouted, r.Outbound)
			}
			if r.Unparsable > 0 {
				line += fmt.Sprintf("; %d left dead: their stored messages do not parse as HL7, so they have no lane", r.Unparsable)
			}
			fmt.Fprintln(c.App.Writer, line)
			return nil
		},
	}
}

// postOutbound is POST /outbounds/{name}/{action} for the command's one
// argument, the outbound's name, and the API's answer.
func postOutbound(c *cli.Context, action string) (api.OutboundHold, []byte, error) {
	var h api.OutboundHold
	name, err := outboundArg(c, "hold or release one at a time")
	if err != nil {
		return h, nil, err
	}
	body, _, err := callAPI(c, http.MethodPost, "/outbounds/"+neturl.PathEscape(name)+"/"+action, "operator")
	if err != nil {
		return h, nil, err
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return h, nil, fmt.Errorf("mf %s: the API's answer is not an outbound's hold (%v): %.200s", action, err, body)
	}
	return h, body, nil
}

// outboundArg is the command's one argument, the name of an outbound; one
// is how the command takes them (e.g. "hold or release one at a time").
func outboundArg(c *cli.Context, one string) (string, error) {
	return oneArg(c, argument{What: "outbound", Value: "the outbound's name",
		Needs: "the name of an [[outbound]] of the node's config", Usage: "OUTBOUND", One: one})
}

// argument describes the one argument of a command, for its errors.
type argument struct {
	What  string // what the command takes one of: "outbound"
	Value string // the argument: "the outbound's name"
	Needs string // what the command needs: "the name of an [[outbound]] of the node's config"
	Usage string // its name in the usage line: "OUTBOUND"
	One   string // how the command takes several: "hold or release one at a time"
}

// oneArg is the command's one argument, refused, before any request, when
// missing, empty, or not alone.
func oneArg(c *cli.Context, a argument) (string, error) {
	action := c.Command.Name
	switch {
	case c.NArg() == 0:
		return "", fmt.Errorf("mf %s needs %s: mf %s [--api URL] %s", action, a.Needs, action, a.Usage)
	case c.NArg() > 1:
		// urfave/cli stops reading flags at the first argument: mf hold
		// emr --api URL would go to the default node.
		why := "flags go before " + a.Value
		if !strings.HasPrefix(c.Args().Get(1), "-") {
			why = a.One
		}
		return "", fmt.Errorf("mf %s takes one %s, and was given %s: %s", action, a.What, quoteAll(c.Args().Slice()), why)
	}
	v := c.Args().First()
	if v == "" {
		return "", fmt.Errorf("mf %s: %s is empty", action, a.Value)
	}
	return v, nil
}

// flagQuery is the query string ("?since=...", or "" for none) of the
// command's flags named by params, the API's parameters with - for _ (flag
// control-id is parameter control_id), those set only, as they are: the
// API checks them, and its 400 names the bad one.
func flagQuery(c *cli.Context, params ...string) string {
	q := neturl.Values{}
	for _, p := range params {
		if f := strings.ReplaceAll(p, "_", "-"); c.IsSet(f) {
			q.Set(p, c.String(f))
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// printed ends a command that printed the API's JSON (--json), or failed.
func printed(c *cli.Context, body []byte, err error) error {
	if err != nil {
		return err
	}
	return printJSON(c.App.Writer, body)
}

// quoteAll is args quoted, comma-separated.
func quoteAll(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, ", ")
}

// shellWord is name as a shell would take it back as one word: as it is
// when it has only characters a shell leaves alone, else single-quoted.
func shellWord(name string) string {
	if name != "" && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:/@+") == "" {
		return name
	}
	return "'" + strings.ReplaceAll(name, "'", `'\''`) + "'"
}

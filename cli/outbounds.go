package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

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
				since = " since " + time.UnixMicro(int64(*h.Since*1e6)).UTC().Format("2006-01-02 15:04:05 UTC")
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

// postOutbound is POST /outbounds/{name}/{action} for the command's one
// argument, the outbound's name, and the API's answer.
func postOutbound(c *cli.Context, action string) (api.OutboundHold, []byte, error) {
	var h api.OutboundHold
	switch {
	case c.NArg() == 0:
		return h, nil, fmt.Errorf("mf %s needs the name of an [[outbound]] of the node's config: mf %s [--api URL] OUTBOUND", action, action)
	case c.NArg() > 1:
		// urfave/cli stops reading flags at the first argument: mf hold
		// emr --api URL would go to the default node.
		why := "flags go before the outbound's name"
		if !strings.HasPrefix(c.Args().Get(1), "-") {
			why = "hold or release one at a time"
		}
		return h, nil, fmt.Errorf("mf %s takes one outbound, and was given %s: %s", action, quoteAll(c.Args().Slice()), why)
	}
	name := c.Args().First()
	if name == "" {
		return h, nil, fmt.Errorf("mf %s: the outbound's name is empty", action)
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

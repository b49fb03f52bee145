package cli

import (
	"encoding/json"
	"fmt"
	neturl "net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/internal/textcut"
)

// defaultLanesLimit is mf lanes' page without --limit: GET /lanes without
// limit reads every unfinished row, seconds with a large backlog.
const defaultLanesLimit = 100

// lastErrorColumn bounds the last error a line of mf lanes shows (--json
// has it whole).
const lastErrorColumn = 80

func lanesCommand() *cli.Command {
	return &cli.Command{
		Name:  "lanes",
		Usage: "list a page of the lanes with work: depth, head, age, blocked or held, last error (GET /lanes)",
		Flags: append(apiFlags(),
			&cli.IntFlag{Name: "limit", Value: defaultLanesLimit, Usage: "lanes on the page, 1 to " + strconv.Itoa(api.MaxLanesLimit)},
			&cli.StringFlag{Name: "after", Usage: "the page after this one: the cursor the page before ended with (its next_after)"},
		),
		Action: func(c *cli.Context) error {
			limit := c.Int("limit")
			if limit < 1 || limit > api.MaxLanesLimit {
				return fmt.Errorf("mf lanes: --limit %d: want 1 to %d", limit, api.MaxLanesLimit)
			}
			path := "/lanes?limit=" + strconv.Itoa(limit)
			if c.IsSet("after") {
				if c.String("after") == "" {
					return fmt.Errorf("mf lanes: --after is empty: leave it out for the first page, or give the cursor a page ended with")
				}
				path += "&after=" + neturl.QueryEscape(c.String("after"))
			}
			body, _, err := getAPI(c, path, "viewer")
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, body)
			}
			var page api.LanePage
			if err := json.Unmarshal(body, &page); err != nil {
				return fmt.Errorf("mf lanes: the API's answer is not a page of lanes (%v): %.200s", err, body)
			}
			w := c.App.Writer
			if len(page.Lanes) == 0 && !c.IsSet("after") {
				_, err := fmt.Fprintln(w, "no lane has work")
				return err
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LANE\tDEPTH\tHEAD\tHEAD AGE\tSTATE\tATTEMPTS\tLAST ERROR")
			var blocked []api.Lane
			for _, l := range page.Lanes {
				state := "-"
				switch {
				case l.OutboundHeld:
					state = "held"
				case l.Blocked:
					state = "blocked"
				}
				lastErr := "-"
				if l.LastError != "" {
					lastErr = printable(l.LastError)
					if cut := textcut.Cut(lastErr, lastErrorColumn); cut != lastErr {
						lastErr = cut + "…"
					}
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%s\n", printable(l.Lane), l.Depth, l.HeadID, age(l.HeadAge), state, l.Attempts, lastErr)
				if state == "blocked" {
					blocked = append(blocked, l)
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(w)
			if line := blockedLine(c, blocked); line != "" {
				fmt.Fprintln(w, line)
			}
			if page.NextAfter == nil {
				_, err := fmt.Fprintln(w, "last page")
				return err
			}
			_, err = fmt.Fprintf(w, "more lanes: %s\n", nextPageCommand(c, "--limit", strconv.Itoa(limit), "--after", shellWord(*page.NextAfter)))
			return err
		},
	}
}

// nextPageCommand is the command for the next page of a listing command
// (mf lanes, mf messages): the command, to the same node, with args, each a
// shell word already.
func nextPageCommand(c *cli.Context, args ...string) string {
	return strings.Join(append(sameNode(c, c.Command.Name), args...), " ")
}

// blockedLine is the line that tells the operator how to act on the heads
// of a page's blocked lanes (those shown blocked, not held), with the
// commands to the same node; "" when none is.
func blockedLine(c *cli.Context, blocked []api.Lane) string {
	retry, skip := strings.Join(sameNode(c, "retry"), " "), strings.Join(sameNode(c, "skip"), " ")
	switch len(blocked) {
	case 0:
		return ""
	case 1:
		l := blocked[0]
		return fmt.Sprintf("lane %s is blocked at queue row %d: %s %d sends it again, %s %d sets it aside as dead",
			printable(l.Lane), l.HeadID, retry, l.HeadID, skip, l.HeadID)
	}
	return fmt.Sprintf("%d lanes are blocked, each at its HEAD: %s HEAD sends it again, %s HEAD sets it aside as dead", len(blocked), retry, skip)
}

// sameNode is mf command with the flags that reach the node this command
// reached, --api and --tls-ca, when they are not the default.
func sameNode(c *cli.Context, command string) []string {
	args := []string{"mf", command}
	if base := strings.TrimSuffix(c.String("api"), "/"); base != defaultAPI {
		args = append(args, "--api", shellWord(shownAPI(base)))
	}
	if ca := c.String("tls-ca"); ca != "" {
		args = append(args, "--tls-ca", shellWord(ca))
	}
	return args
}

// age is a head's age in seconds as a duration: to 0.1 s under a minute,
// to the second above.
func age(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// printable is s, quoted when it holds a control character (a tab or a
// line break in a lane's key or a destination's error would break the
// table's line) or begins or ends with a blank (lane "emr/123 " is not
// lane "emr/123").
func printable(s string) string {
	if strings.ContainsFunc(s, unicode.IsControl) || strings.TrimSpace(s) != s {
		return strconv.Quote(s)
	}
	return s
}

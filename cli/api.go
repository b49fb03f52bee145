package cli

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
)

// TokenEnv names the environment variable that holds the API token of the
// commands that call the API, mf status, nodes, lanes, messages, message,
// hold, release, resend, resend-dead, retry and skip (never a flag: it
// would show in the process list).
const TokenEnv = "MF_API_TOKEN"

// defaultAPI is the API's base URL without --api or MF_API.
const defaultAPI = "http://127.0.0.1:8765"

func apiFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "api", Value: defaultAPI, EnvVars: []string{"MF_API"}, Usage: "base URL of a node's API"},
		&cli.StringFlag{Name: "tls-ca", Usage: "PEM CA that signed the API's certificate (default: the system roots)"},
		&cli.BoolFlag{Name: "json", Usage: "print the API's JSON as it is"},
	}
}

// getAPI fetches path from the node's API with the token of MF_API_TOKEN,
// and returns the answer's body and headers; the command takes no argument.
// role is the least role the endpoint needs, as for callAPI.
func getAPI(c *cli.Context, path, role string) ([]byte, http.Header, error) {
	// mf status node-b asked the default node, or MF_API's, and answered
	// for it as if for node-b; a flag after the argument was not read.
	if c.NArg() > 0 {
		return nil, nil, fmt.Errorf("mf %s takes no argument, and was given %q: name the node with --api URL (or MF_API), before any other argument", c.Command.Name, c.Args().First())
	}
	return callAPI(c, http.MethodGet, path, role)
}

// Client timeouts of callAPI: a read's, which is above the API's own bound
// on a search of the store (30 s: a 30-day search of 2 million messages
// took SQLite 11 s, and mf messages gave up at 10 s with a client timeout
// that said nothing of the window), and a write's, which is above the API's
// own bound on an operator's store write (15 s); either way the API's
// answer, a 503 saying why (and whether a write may have been applied),
// comes first.
const (
	apiReadTimeout  = 40 * time.Second
	apiWriteTimeout = 30 * time.Second
)

// callAPI sends method path to the node's API (--api, MF_API) with the
// token of MF_API_TOKEN, and returns the answer's body and headers; an
// answer other than 200 is an error with the API's words. role is the
// least role the endpoint needs, which the error of a 401 or 403 names.
func callAPI(c *cli.Context, method, path, role string) ([]byte, http.Header, error) {
	client := &http.Client{Timeout: apiReadTimeout}
	if method != http.MethodGet {
		client.Timeout = apiWriteTimeout
	}
	if ca := c.String("tls-ca"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", ca)
		}
		// The default transport's settings (a proxy from HTTPS_PROXY,
		// timeouts), with the CA: a bare Transport ignored the proxy.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		client.Transport = t
	}
	base := strings.TrimSuffix(c.String("api"), "/")
	// host:port alone is how every other address is given (mf send --to);
	// net/url's error for it names neither the flag nor the fix.
	if u, err := neturl.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		hint := ""
		if !strings.Contains(base, ":/") {
			hint = fmt.Sprintf(" (http://%s, or https:// with TLS)", shownAPI(base))
		}
		return nil, nil, fmt.Errorf("--api %q: want the API's base URL, http://HOST:PORT or https://HOST:PORT%s", shownAPI(base), hint)
	}
	url := base + path
	shown := shownAPI(base) // for errors: a password in --api stays out of terminals and CI logs
	req, err := http.NewRequestWithContext(c.Context, method, url, nil)
	if err != nil {
		return nil, nil, err
	}
	// A token kept in a file often ends in a newline (MF_API_TOKEN=$(cat
	// f) keeps none, an env file or a secret mount may): net/http refuses
	// it in a header with an error that does not say where it came from.
	if tok := strings.TrimSpace(os.Getenv(TokenEnv)); tok != "" {
		if strings.ContainsFunc(tok, unicode.IsControl) {
			return nil, nil, fmt.Errorf("%s holds a control character (a line break inside the token?): it cannot go in a header", TokenEnv)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := client.Do(req)
	if err != nil {
		// net/http's error repeats the method and URL this one starts with.
		if ue := (*neturl.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		hint := ""
		if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
			hint = " (no API answers at " + shown + ": is mf running there? name the node with --api URL or MF_API)"
		} else if method != http.MethodGet {
			// A write whose answer did not come may have been applied.
			hint = " (the node may have applied it all the same)"
		}
		return nil, nil, fmt.Errorf("%s %s: %w%s", method, shown+path, err, hint)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			// Not mf's answer (a proxy's 502, say): what it said, briefly.
			e.Error = strings.TrimSpace(string(body))
			if len(e.Error) > 200 {
				e.Error = e.Error[:200] + "…"
			}
			if e.Error == "" {
				e.Error = "(no body)"
			}
		}
		roles := role + " or above"
		if role == "operator" {
			roles = "operator or admin"
		}
		hint := ""
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
			hint = " (set " + TokenEnv + " to a token of role " + roles + "; mf token new makes one)"
		case resp.StatusCode == http.StatusForbidden && role != "viewer":
			// A viewer's token is refused nothing a viewer may read.
			hint = " (mf " + c.Command.Name + " needs a token of role " + roles + " in " + TokenEnv + ")"
		}
		return nil, nil, fmt.Errorf("%s %s: %s: %s%s", method, shown+path, resp.Status, e.Error, hint)
	}
	return body, resp.Header, nil
}

// epochTime is a time of the API's, epoch seconds to the microsecond, as a
// time: rounded, since a float's seconds times 1e6 may fall a hair short of
// the microsecond it was.
func epochTime(seconds float64) time.Time {
	return time.UnixMicro(int64(math.Round(seconds * 1e6)))
}

func printJSON(w io.Writer, body []byte) error {
	var out bytes.Buffer
	// The API's answer ends with a newline, which Indent would keep.
	if err := json.Indent(&out, bytes.TrimRight(body, " \t\r\n"), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := out.WriteTo(w)
	return err
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a node's role (GET /cluster/status)",
		Flags: apiFlags(),
		Action: func(c *cli.Context) error {
			body, _, err := getAPI(c, "/cluster/status", "viewer")
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, body)
			}
			var s api.ClusterStatus
			if err := json.Unmarshal(body, &s); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "node\t%s\nrole\t%s\nclustered\t%v\nleader\t%v\nterm\t%d\nconfig version\t%d\n",
				s.NodeID, s.Role, s.Clustered, s.IsLeader, s.Term, s.ConfigVersion)
			return tw.Flush()
		},
	}
}

func nodesCommand() *cli.Command {
	return &cli.Command{
		Name:  "nodes",
		Usage: "list the cluster's nodes and its leader (GET /cluster/nodes)",
		Flags: apiFlags(),
		Action: func(c *cli.Context) error {
			body, header, err := getAPI(c, "/cluster/nodes", "viewer")
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, body)
			}
			var n api.ClusterNodes
			if err := json.Unmarshal(body, &n); err != nil {
				return err
			}
			// The times are the database's: counted from its clock, not
			// this machine's, which may be minutes off (an older server
			// sends no such header).
			now := time.Now()
			if db, err := strconv.ParseFloat(header.Get(api.DBNowHeader), 64); err == nil {
				now = epochTime(db)
			}
			ago := func(t *float64) string {
				if t == nil {
					return "-"
				}
				return now.Sub(epochTime(*t)).Round(100*time.Millisecond).String() + " ago"
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tHOST\tPID\tSTATUS\tLEADER\tLAST SEEN\tSTARTED")
			for _, e := range n.Nodes {
				flag := ""
				if e.IsLeader {
					flag = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.NodeID, e.Host, e.PID, e.Status, flag, ago(e.LastSeen), ago(e.StartedAt))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "\nleader: %s\n", leaderLine(n, now))
			return nil
		},
	}
}

// leaderLine says who leads and on what lease. A single node's answer names
// itself lease owner with no expiry: it holds no lease and leads while it
// runs (it used to print "lease expires in never").
func leaderLine(n api.ClusterNodes, now time.Time) string {
	leader := "none"
	if n.LeaderNodeID != nil {
		leader = *n.LeaderNodeID
	}
	switch {
	case n.LeaseOwner != nil && n.LeaseExpiresAt == nil:
		return leader + " (single node: it takes no lease and leads while it runs)"
	case n.LeaseExpiresAt == nil:
		return leader + " (no lease: no node has been elected yet)"
	}
	owner := "none"
	if n.LeaseOwner != nil {
		owner = *n.LeaseOwner
	}
	left := epochTime(*n.LeaseExpiresAt).Sub(now).Round(100 * time.Millisecond)
	if left < 0 {
		return fmt.Sprintf("%s (lease owner %s, lease expired %s ago)", leader, owner, -left)
	}
	return fmt.Sprintf("%s (lease owner %s, lease expires in %s)", leader, owner, left)
}

func tokenCommand() *cli.Command {
	token := &cli.Command{
		Name:  "token",
		Usage: "API tokens",
		Subcommands: []*cli.Command{{
			Name:  "new",
			Usage: "print a new token and the config lines that grant it a role",
			Flags: []cli.Flag{
				// Not Required: urfave/cli prints the help to stdout beside a
				// missing required flag's error (see usageErrorOnly).
				&cli.StringFlag{Name: "role", Usage: "viewer, operator or admin (required)"},
				&cli.StringFlag{Name: "name", Value: "", Usage: "a name for the token, shown in logs (default: the role)"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return fmt.Errorf("token new takes no argument, and was given %q: name the token with --name", c.Args().First())
				}
				role := c.String("role")
				if role == "" {
					return errors.New("token new: --role is required: viewer, operator or admin")
				}
				if !api.HasPermission(role, api.MonitoringRead) {
					return errors.New("token new: --role must be viewer, operator or admin")
				}
				name := c.String("name")
				if name == "" {
					name = role
				}
				// Written into a TOML file: TOML holds UTF-8 only.
				if !utf8.ValidString(name) {
					return errors.New("token new: --name is not valid UTF-8")
				}
				if f := config.NameFault(name); f != "" {
					return fmt.Errorf("token new: --name %q %s; the config would refuse it", name, f)
				}
				tok, sum, err := api.NewToken()
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "token: %s\n\nGive the token to its user (it is shown only now), and add these lines to every node's\nconfig, which keeps only its SHA-256; then restart the nodes (the API reads its tokens at start):\n\n[[api.tokens]]\nname = %s\nrole = %q\nsha256 = %q\n", tok, config.TOMLString(name), role, sum)
				return nil
			},
		}},
	}
	token.Action = unknownCommand("token", func() []*cli.Command { return token.Subcommands }, cli.ShowSubcommandHelp)
	return token
}

// shownAPI is base (--api) as errors and hints print it: a password in its
// user info (a proxy's basic auth) replaced by xxxxx, as net/url redacts.
func shownAPI(base string) string {
	if u, err := neturl.Parse(base); err == nil && u.User != nil {
		return u.Redacted()
	}
	// Not a URL net/url reads (no scheme, say): whatever comes before an @
	// may be a user and password.
	if i := strings.LastIndex(base, "@"); i >= 0 {
		scheme, _, found := strings.Cut(base[:i], "://")
		if found {
			return scheme + "://xxxxx" + base[i:]
		}
		return "xxxxx" + base[i:]
	}
	return base
}

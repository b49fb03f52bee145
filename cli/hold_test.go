package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
)

// oddOutbound is an outbound name a URL's path and a shell must each
// escape.
const oddOutbound = "lab west #1 it's 100%?"

// The tokens of apiNode's config, one per role.
var apiTokens = map[string]string{"viewer": "tok-viewer", "operator": "tok-operator"}

// apiNode is a single-node engine with outbounds emr and lab, and the
// tokens of apiTokens, whose API a real api.Server serves; it returns the
// engine and the API's base URL.
func apiNode(t *testing.T) (*enginetest.Engine, string) {
	t.Helper()
	return apiNodeWith(t, "")
}

// apiNodeWith is apiNode with more added to its config (an inbound and
// its routes). Its API tells the engine's lanes of a hold or release, as
// mf run's does.
func apiNodeWith(t *testing.T, more string) (*enginetest.Engine, string) {
	t.Helper()
	var cfg strings.Builder
	cfg.WriteString(more)
	for role, tok := range apiTokens {
		sum := sha256.Sum256([]byte(tok))
		fmt.Fprintf(&cfg, "[[api.tokens]]\nname = %q\nrole = %q\nsha256 = %q\n\n", role+"-token", role, hex.EncodeToString(sum[:]))
	}
	for i, name := range []string{"emr", "lab", oddOutbound} {
		fmt.Fprintf(&cfg, "[[outbound]]\nname = %q\ntype = \"file\"\ndirectory = \"{{dir}}/out%d\"\n\n", name, i)
	}
	e := enginetest.Start(t, cfg.String())
	s := api.New(api.Options{Config: e.Config, Store: e.Store, Status: e.Status, OutboundHeld: e.OutboundHeld, QueueChanged: e.QueueChanged, Log: zerolog.New(zerolog.NewTestWriter(t))})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return e, srv.URL
}

// inboundRoutedTo is config text for apiNodeWith: inbound "in" (MLLP, on a
// free port) and its route to dests, laned by PID-3.1.
func inboundRoutedTo(t *testing.T, dests ...string) string {
	t.Helper()
	to := make([]string, len(dests))
	for i, d := range dests {
		to[i] = strconv.Quote(d)
	}
	return fmt.Sprintf("[[inbound]]\nname = \"in\"\ntype = \"mllp\"\nlisten = %q\n\n[[route]]\nfrom = \"in\"\nto = [%s]\nlane_key = \"PID-3.1\"\n\n",
		enginetest.FreeAddr(t), strings.Join(to, ", "))
}

// refusal is a command that must fail, run with token in MF_API_TOKEN:
// its error says each of want, and it prints nothing else.
type refusal struct {
	name, token string
	args        []string
	want        []string
}

// checkRefusals runs each refusal and checks its error.
func checkRefusals(t *testing.T, refusals []refusal) {
	t.Helper()
	for _, tc := range refusals {
		t.Setenv(TokenEnv, tc.token)
		out, err := runMF(t, tc.args...)
		if err == nil {
			t.Errorf("%s: mf %s succeeded, printed %q", tc.name, strings.Join(tc.args, " "), out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: mf %s: error %q; want it to say %q", tc.name, strings.Join(tc.args, " "), err, w)
			}
		}
		if out != "" {
			t.Errorf("%s: mf %s printed %q besides its error", tc.name, strings.Join(tc.args, " "), out)
		}
	}
}

// held is the names of the outbounds the store holds.
func held(t *testing.T, e *enginetest.Engine) []string {
	t.Helper()
	hs, err := e.Store.OutboundHolds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range hs {
		names = append(names, h.Outbound)
	}
	return names
}

// Operators had no command for POST /outbounds/{name}/hold and /release:
// mf hold and mf release call them, reaching the node and its token as mf
// status does, and say in a line what the API answered.
func TestHoldAndReleaseAnOutbound(t *testing.T) {
	e, url := apiNode(t)
	t.Setenv(TokenEnv, apiTokens["operator"])

	out, err := runMF(t, "hold", "--api", url, "emr")
	if err != nil || !strings.HasPrefix(out, `outbound "emr" held since `) || !strings.Contains(out, "mf release emr") {
		t.Fatalf("mf hold emr: %v, printed %q; want a line saying it is held since when, and how to release it", err, out)
	}
	if got := held(t, e); len(got) != 1 || got[0] != "emr" {
		t.Fatalf("after mf hold emr the store holds %v; want [emr]", got)
	}
	// Holding it again changes nothing: the same since.
	again, err := runMF(t, "hold", "--api", url, "emr")
	if err != nil || again != out {
		t.Fatalf("mf hold emr again: %v, printed %q; want %q again", err, again, out)
	}
	out, err = runMF(t, "hold", "--api", url, "--json", "lab")
	if err != nil || !strings.Contains(out, `"outbound": "lab"`) || !strings.Contains(out, `"held": true`) {
		t.Fatalf("mf hold --json lab: %v, printed %q; want the API's JSON", err, out)
	}

	out, err = runMF(t, "release", "--api", url, "emr")
	if err != nil || !strings.HasPrefix(out, `outbound "emr" released: it is not held now`) {
		t.Fatalf("mf release emr: %v, printed %q", err, out)
	}
	if got := held(t, e); len(got) != 1 || got[0] != "lab" {
		t.Fatalf("after mf release emr the store holds %v; want [lab]", got)
	}
	// A name with a space, a quote, %, # and ?: one path segment
	// to the API, and the line's mf release command one shell word.
	out, err = runMF(t, "hold", "--api", url, oddOutbound)
	if err != nil || !strings.Contains(out, `mf release 'lab west #1 it'\''s 100%?' (`) {
		t.Fatalf("mf hold %q: %v, printed %q", oddOutbound, err, out)
	}
	if got := held(t, e); len(got) != 2 || got[1] != oddOutbound {
		t.Fatalf("after mf hold %q the store holds %q", oddOutbound, got)
	}
	if out, err := runMF(t, "release", "--api", url, oddOutbound); err != nil || !strings.Contains(out, "released") {
		t.Fatalf("mf release %q: %v, printed %q", oddOutbound, err, out)
	}
	// MF_API names the node as for mf status.
	t.Setenv("MF_API", url)
	if out, err := runMF(t, "release", "lab"); err != nil || !strings.HasPrefix(out, `outbound "lab" released`) {
		t.Fatalf("mf release lab with MF_API: %v, printed %q", err, out)
	}
	if got := held(t, e); len(got) != 0 {
		t.Fatalf("after mf release lab the store holds %v; want none", got)
	}
}

// mf hold and mf release fail, exit non-zero, with an error that says what
// went wrong and what to do: no token, a token whose role may not, an
// outbound the node does not have, a node that is not there, an answer of
// the API's that refuses it, a missing or extra argument.
func TestHoldAndReleaseRefusals(t *testing.T) {
	e, url := apiNode(t)
	conflict, _ := answering(t, http.StatusConflict, `outbound "emr" cannot be held now`)
	nobody := "http://" + enginetest.FreeAddr(t)
	checkRefusals(t, []refusal{
		{"no token", "", []string{"hold", "--api", url, "emr"},
			[]string{"401 Unauthorized", "set " + TokenEnv + " to a token of role operator or admin"}},
		{"unknown token", "tok-nobody", []string{"release", "--api", url, "emr"},
			[]string{"401 Unauthorized", "set " + TokenEnv}},
		{"viewer", apiTokens["viewer"], []string{"hold", "--api", url, "emr"},
			[]string{"403 Forbidden", "lacks QUEUE_WRITE", "mf hold needs a token of role operator or admin"}},
		{"unknown outbound", apiTokens["operator"], []string{"hold", "--api", url, "nope"},
			[]string{"404 Not Found", `no outbound "nope" in this node's config`}},
		{"unknown outbound, release", apiTokens["operator"], []string{"release", "--api", url, "nope"},
			[]string{"404 Not Found", `no outbound "nope"`}},
		{"conflict", apiTokens["operator"], []string{"hold", "--api", conflict, "emr"},
			[]string{"409 Conflict", `outbound "emr" cannot be held now`}},
		{"no node", apiTokens["operator"], []string{"hold", "--api", nobody, "emr"},
			[]string{"POST " + nobody + "/outbounds/emr/hold", "connection refused", "no API answers at " + nobody}},
		{"no argument", apiTokens["operator"], []string{"hold", "--api", url},
			[]string{"mf hold needs the name of an [[outbound]]"}},
		{"two arguments", apiTokens["operator"], []string{"release", "--api", url, "emr", "lab"},
			[]string{"mf release takes one outbound", `"emr", "lab"`}},
		{"a flag after the name", apiTokens["operator"], []string{"hold", "emr", "--api", url},
			[]string{"mf hold takes one outbound", "flags go before"}},
	})
	if got := held(t, e); len(got) != 0 {
		t.Fatalf("after the refusals the store holds %v; want none", got)
	}
}

// answering is the URL of a server that answers every request status with
// the API's error JSON saying what, and how many requests it was asked.
func answering(t *testing.T, status int, what string) (string, *atomic.Int32) {
	t.Helper()
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"error": what})
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &asked
}

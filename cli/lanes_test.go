package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// queueLanes stores a message for each key of each destination, whose
// lanes stay pending: no [[outbound]] of apiNode's config delivers them.
func queueLanes(t *testing.T, e *enginetest.Engine, dests, keys []string) {
	t.Helper()
	var msgs []storage.NewMessage
	for i, key := range keys {
		for _, dest := range dests {
			msgs = append(msgs, storage.NewMessage{Inbound: "adt_in", ControlID: fmt.Sprintf("C%d", i), Payload: []byte(enginetest.ADT("C", key)),
				Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: dest, Lane: dest + "/" + key}}})
		}
	}
	if _, err := e.Store.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
}

// nextPage is the --after of the line mf lanes ends a page with when more
// lanes follow, "" when it says none do.
var nextPage = regexp.MustCompile(`(?m)^more lanes: mf lanes --api (\S+) --limit (\d+) --after (\S+)$`)

// mf lanes prints a page of GET /lanes as a table: a walk of its pages, each
// ending with the command for the next, lists every lane once, in the
// API's order, a held outbound's lanes marked held; --json prints the API's
// page as it is.
func TestLanesPrintsPagesOfLanes(t *testing.T) {
	e, url := apiNode(t)
	keys := []string{"P1", "P2", "P3", "P4", "P5"}
	queueLanes(t, e, []string{"ris", "pacs"}, keys)
	// A hold of ris in the store: its rows stay pending either way.
	if _, err := e.Store.OutboundHold(context.Background(), storage.OutboundHoldParams{Outbound: "ris"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(TokenEnv, apiTokens["operator"])
	t.Setenv("MF_API", url)

	out, err := runMF(t, "lanes", "--json", "--limit", "10000")
	if err != nil {
		t.Fatalf("mf lanes --json: %v\n%s", err, out)
	}
	var all api.LanePage
	if err := json.Unmarshal([]byte(out), &all); err != nil || len(all.Lanes) != 10 || all.NextAfter != nil {
		t.Fatalf("mf lanes --json --limit 10000: %v, printed\n%s\nwant a page of the 10 lanes, next_after null", err, out)
	}

	var walked []string
	args := []string{"lanes", "--limit", "3"}
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("the walk of mf lanes --limit 3 does not end")
		}
		out, err := runMF(t, args...)
		if err != nil {
			t.Fatalf("mf %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if !strings.HasPrefix(lines[0], "LANE ") || !strings.Contains(lines[0], "DEPTH") || !strings.Contains(lines[0], "LAST ERROR") {
			t.Fatalf("mf %s printed no table header:\n%s", strings.Join(args, " "), out)
		}
		for _, l := range lines[1:] {
			if l == "" {
				break
			}
			fields := strings.Fields(l)
			walked = append(walked, fields[0])
			if held := strings.HasPrefix(fields[0], "ris/"); held != slices.Contains(fields, "held") {
				t.Errorf("lane line %q: held %v; want it marked held only for ris's lanes", l, !held)
			}
		}
		m := nextPage.FindStringSubmatch(out)
		if m == nil {
			if !strings.Contains(out, "\nlast page\n") {
				t.Fatalf("mf %s ends with no next page and no \"last page\":\n%s", strings.Join(args, " "), out)
			}
			break
		}
		if m[1] != url || m[2] != "3" {
			t.Fatalf("the next page's command has --api %s --limit %s; want --api %s --limit 3", m[1], m[2], url)
		}
		args = []string{"lanes", "--api", m[1], "--limit", m[2], "--after", m[3]}
	}
	var want []string
	for _, l := range all.Lanes {
		want = append(want, l.Lane)
	}
	if !slices.Equal(walked, want) {
		t.Fatalf("the pages of mf lanes --limit 3 listed %q; want %q", walked, want)
	}

	// A viewer sees hashed lanes, as the API shows them.
	t.Setenv(TokenEnv, apiTokens["viewer"])
	if out, err := runMF(t, "lanes"); err != nil || strings.Contains(out, "/P1") || !strings.Contains(out, "pacs/#") {
		t.Fatalf("mf lanes as a viewer: %v, printed\n%s\nwant hashed lanes", err, out)
	}
	// No lane: said so.
	_, empty := apiNode(t)
	if out, err := runMF(t, "lanes", "--api", empty); err != nil || out != "no lane has work\n" {
		t.Fatalf("mf lanes on a node with no lane: %v, printed %q", err, out)
	}
}

// mf lanes refuses a --limit the API would, and an argument, before it
// asks; a cursor the cluster did not give is refused with the API's words.
func TestLanesRefusals(t *testing.T) {
	_, url := apiNode(t)
	t.Setenv(TokenEnv, apiTokens["viewer"])
	t.Setenv("MF_API", url)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lanes", "--limit", "0"}, "--limit 0: want 1 to 10000"},
		{[]string{"lanes", "--limit", "-1"}, "--limit -1: want 1 to 10000"},
		{[]string{"lanes", "--limit", "10001"}, "--limit 10001: want 1 to 10000"},
		{[]string{"lanes", "--limit", "abc"}, `invalid value "abc" for flag -limit`},
		{[]string{"lanes", "--after", ""}, "--after is empty"},
		{[]string{"lanes", "--after", "abc"}, "400 Bad Request: query parameter after: not a next_after this cluster gave"},
		{[]string{"lanes", "emr"}, "mf lanes takes no argument"},
	} {
		out, err := runMF(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mf %s: error %v, printed %q; want %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}

// A blocked lane says so with its attempts and its last error, cut to one
// line of the table; a key or an error with a line break or a tab, or a
// key that ends with a blank, is quoted, so that each lane keeps one line.
// A line after the table gives the commands that act on its head.
func TestLanesShowsBlockedLanesOnOneLine(t *testing.T) {
	long := strings.Repeat("x", 200)
	body := `{"lanes":[` +
		`{"lane":"emr/P1","destination":"emr","depth":4,"head_id":17,"head_age_seconds":3723.4,"blocked":true,"attempts":9,"last_error":"AE: ` + long + `"},` +
		`{"lane":"emr/P\t2","destination":"emr","depth":1,"head_id":18,"head_age_seconds":0.04,"blocked":false,"attempts":1,"last_error":"dial: refused\nretrying"},` +
		`{"lane":"emr/123 ","destination":"emr","depth":1,"head_id":19,"head_age_seconds":1.26,"blocked":false,"attempts":0,"last_error":""}` +
		`],"next_after":null}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	t.Setenv(TokenEnv, "mf_tok")
	out, err := runMF(t, "lanes", "--api", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if len(lines) != 8 || lines[4] != "" || lines[6] != "last page" {
		t.Fatalf("mf lanes printed %d lines:\n%s\nwant a header, 3 lanes, a blank line, the blocked lane's line and \"last page\"", len(lines)-1, out)
	}
	if want := "lane emr/P1 is blocked at queue row 17: mf retry --api " + srv.URL + " 17 sends it again, mf skip --api " + srv.URL + " 17 sets it aside as dead"; lines[5] != want {
		t.Errorf("the line after the table: %q; want %q", lines[5], want)
	}
	for i, want := range []*regexp.Regexp{
		regexp.MustCompile(`^emr/P1 +4 +17 +1h2m3s +blocked +9 +AE: x{76}…$`),
		regexp.MustCompile(`^"emr/P\\t2" +1 +18 +0s +- +1 +"dial: refused\\nretrying"$`),
		regexp.MustCompile(`^"emr/123 " +1 +19 +1.3s +- +0 +-$`),
	} {
		if !want.MatchString(lines[i+1]) {
			t.Errorf("lane line %d: %q; want it to match %s", i+1, lines[i+1], want)
		}
	}
}

// With more than one lane blocked on the page, the line after the table
// says how many and names the commands with HEAD for each; a lane whose
// outbound is held is shown held, and is not counted. With no lane blocked
// there is no such line.
func TestLanesSaysHowToActOnBlockedHeads(t *testing.T) {
	body := `{"lanes":[` +
		`{"lane":"emr/P1","destination":"emr","depth":4,"head_id":17,"head_age_seconds":3,"blocked":true,"attempts":9,"last_error":"AE"},` +
		`{"lane":"emr/P2","destination":"emr","depth":1,"head_id":18,"head_age_seconds":3,"blocked":true,"attempts":1,"last_error":"AE"},` +
		`{"lane":"lab/P1","destination":"lab","depth":1,"head_id":19,"head_age_seconds":3,"blocked":true,"attempts":1,"last_error":"AE","outbound_held":true}` +
		`],"next_after":null}`
	serve := func(body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	t.Setenv(TokenEnv, "mf_tok")
	url := serve(body)
	out, err := runMF(t, "lanes", "--api", url+"/")
	want := "\n\n2 lanes are blocked, each at its HEAD: mf retry --api " + url + " HEAD sends it again, mf skip --api " + url + " HEAD sets it aside as dead\nlast page\n"
	if err != nil || !strings.HasSuffix(out, want) {
		t.Fatalf("mf lanes with two lanes blocked: %v, printed\n%s\nwant it to end with %q", err, out, want)
	}
	url = serve(strings.ReplaceAll(body, `"blocked":true`, `"blocked":false`))
	if out, err := runMF(t, "lanes", "--api", url); err != nil || strings.Contains(out, "mf retry") || !strings.HasSuffix(out, "AE\n\nlast page\n") {
		t.Fatalf("mf lanes with no lane blocked: %v, printed\n%s\nwant the table, a blank line and \"last page\"", err, out)
	}
}

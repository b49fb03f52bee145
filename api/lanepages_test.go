package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// GET /lanes read every unfinished row for every request (3 to 10 s with
// 500,000 of them). With limit it answers a page of lanes, and next_after
// to ask for the next: a walk of pages lists every lane once, in the order
// of the listing without limit, to a viewer (hashed lanes; its cursors name
// no lane) as to an operator. The answer without limit is as it was.
func TestLanePagesListEveryLaneOnce(t *testing.T) {
	v := start(t, fileOutbound)
	var msgs []storage.NewMessage
	for i, key := range []string{"P1", "P2", "123", "123 ", "P3", "p3", "", "P4", "P1", "P5"} {
		for _, dest := range []string{"lab", "ris"} {
			msgs = append(msgs, storage.NewMessage{Inbound: "adt_in", ControlID: fmt.Sprintf("L%d", i), Payload: []byte(enginetest.ADT("L", key)),
				Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: dest, Lane: dest + "/" + key}}})
		}
	}
	if _, err := v.e.Store.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	// A second node of the cluster, on the same store: a cursor one node
	// gave, the other takes.
	other := api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: v.e.Status, Log: zerolog.Nop()})
	otherCall := func(path, role string) (int, []byte) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+tokens[role])
		rec := httptest.NewRecorder()
		other.Handler().ServeHTTP(rec, req)
		return rec.Code, rec.Body.Bytes()
	}
	for _, role := range []string{"viewer", "operator"} {
		code, body := v.call(t, "GET", "/lanes", role)
		var all map[string]json.RawMessage
		if code != http.StatusOK || json.Unmarshal(body, &all) != nil || len(all) != 1 || all["lanes"] == nil {
			t.Fatalf("%s: GET /lanes: %d %s; want 200 {\"lanes\":[...]} alone", role, code, body)
		}
		var lanes []api.Lane
		if err := json.Unmarshal(all["lanes"], &lanes); err != nil || len(lanes) != 18 {
			t.Fatalf("%s: GET /lanes listed %d lanes (%v); want 18", role, len(lanes), err)
		}
		for _, limit := range []int{1, 2, 5, 18, 100} {
			var walked []api.Lane
			after := ""
			for pages := 0; ; pages++ {
				if pages > len(lanes) {
					t.Fatalf("%s, limit %d: the walk does not end", role, limit)
				}
				path := fmt.Sprintf("/lanes?limit=%d", limit)
				if after != "" {
					path += "&after=" + url.QueryEscape(after)
				}
				call := v.call
				if pages%2 == 1 {
					call = func(_ *testing.T, _, path, role string) (int, []byte) { return otherCall(path, role) }
				}
				code, body := call(t, "GET", path, role)
				var page api.LanePage
				if code != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Lanes) > limit {
					t.Fatalf("%s: GET %s: %d %s", role, path, code, body)
				}
				walked = append(walked, page.Lanes...)
				if page.NextAfter == nil {
					if !strings.Contains(string(body), `"next_after":null`) {
						t.Fatalf("%s: the last page %s has no \"next_after\":null", role, body)
					}
					break
				}
				for _, l := range page.Lanes {
					if strings.Contains(*page.NextAfter, l.Lane) {
						t.Fatalf("%s: next_after %q holds a lane's name", role, *page.NextAfter)
					}
				}
				after = *page.NextAfter
			}
			if len(walked) != len(lanes) {
				t.Fatalf("%s, limit %d: the pages listed %d lanes, want %d", role, limit, len(walked), len(lanes))
			}
			for i := range lanes {
				if walked[i].Lane != lanes[i].Lane || walked[i].Depth != lanes[i].Depth || walked[i].HeadID != lanes[i].HeadID {
					t.Fatalf("%s, limit %d: lane %d of the pages is %+v, of the whole listing %+v", role, limit, i, walked[i], lanes[i])
				}
			}
		}
	}
	for path, want := range map[string]string{
		"/lanes?limit=0":                "limit",
		"/lanes?limit=10001":            "limit",
		"/lanes?limit=x":                "limit",
		"/lanes?limit=2&limit=3":        "limit",
		"/lanes?after=abc":              "needs limit",
		"/lanes?limit=2&after=abc":      "not a next_after",
		"/lanes?limit=2&after=bGFiL1Ax": "not a next_after", // base64 of "lab/P1": no cursor
		"/lanes?limit=2&after=":         "empty",
	} {
		code, body := v.call(t, "GET", path, "viewer")
		if code != http.StatusBadRequest || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d %s; want 400 saying %q", path, code, body, want)
		}
	}
}

// GET /lanes took any other query parameter and ignored it: /lanes?limt=10
// listed every lane (it reads every unfinished row, 1 to 2.5 s at 500,000)
// where a page of 10 was meant. As GET /messages, an unknown, repeated or
// empty parameter, or a bad value, is a 400 that names the parameter.
func TestLanesRefusesUnknownParametersAndBadValues(t *testing.T) {
	v := start(t, fileOutbound)
	for path, want := range map[string]string{
		"/lanes?limt=10":                    `query parameter \"limt\": unknown (known: limit, after)`,
		"/lanes?Limit=10":                   `query parameter \"Limit\": unknown (known: limit, after)`,
		"/lanes?limit=10&status=blocked":    `query parameter \"status\": unknown (known: limit, after)`,
		"/lanes?destination=emr":            `query parameter \"destination\": unknown`,
		"/lanes?limit=0":                    "query parameter limit: must be an integer from 1 to 10000",
		"/lanes?limit=-1":                   "query parameter limit: must be an integer from 1 to 10000",
		"/lanes?limit=abc":                  "query parameter limit: must be an integer from 1 to 10000",
		"/lanes?limit=+5":                   "query parameter limit: must be an integer from 1 to 10000",
		"/lanes?limit=10001":                "query parameter limit: must be an integer from 1 to 10000",
		"/lanes?limit=99999999999999999999": "query parameter limit: must be an integer from 1 to 10000",
		"/lanes?limit=":                     "query parameter limit: empty",
		"/lanes?limit=1&limit=1":            "query parameter limit: given 2 times",
		"/lanes?limit=5&after=x&after=x":    "query parameter after: given 2 times",
		"/lanes?limit=5&after=%%%":          "the query string does not parse",
		"/lanes?after=abc":                  "query parameter after: needs limit",
		"/lanes?limit=5&after=abc":          "query parameter after: not a next_after this cluster gave",
	} {
		for _, role := range []string{"viewer", "operator"} {
			code, body := v.call(t, "GET", path, role)
			if code != http.StatusBadRequest || !strings.Contains(string(body), want) {
				t.Errorf("%s: GET %s: %d %s; want 400 saying %q", role, path, code, body, want)
			}
		}
	}
	// The parameters it knows still answer.
	for _, path := range []string{"/lanes", "/lanes?limit=5", "/lanes?limit=10000"} {
		if code, body := v.call(t, "GET", path, "viewer"); code != http.StatusOK {
			t.Errorf("GET %s: %d %s; want 200", path, code, body)
		}
	}
}

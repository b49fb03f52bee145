package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// resentDeadShape is the answer of POST /outbounds/{name}/resend-dead with
// rows resent; with none, first_id and last_id are null.
var resentDeadShape = map[string]string{"outbound": "string", "resent": "number", "first_id": "number", "last_id": "number", "not_routed": "number", "unparsable": "number"}

// A destination rejected three messages of one patient, set aside as dead
// (on_exhausted = "dead"), and is fixed: one operator call queues them again,
// at their lane's tail in their order, and they are delivered in that order.
// A limit bounds a call, the next one takes the rest, and a call once all are
// resent resends nothing (200, 0): each dead row is resent once. A viewer may
// not, an outbound the config does not have is 404, and a misspelt or bad
// parameter a 400 that changes nothing.
func TestResendDeadQueuesAnOutboundsDeadRowsAgainOnceInOrder(t *testing.T) {
	dest := enginetest.StartHTTPDestination(t)
	v := start(t, `
[[outbound]]
name = "emr"
type = "http"
url = "`+dest.URL+`"
max_attempts = 1
on_exhausted = "dead"
`)
	cl := enginetest.Dial(t, v.listen)
	poison := func(id string) string { return strings.Replace(enginetest.ADT(id, "P1"), "DOE^JANE", "POISON", 1) }
	for _, id := range []string{"D1", "D2", "D3"} {
		if ack := cl.Send(poison(id)); ack.Code != "AA" {
			t.Fatalf("%s answered %s", id, ack.Code)
		}
	}
	enginetest.WaitFor(t, "the three rows to be set aside as dead", 10*time.Second, func() bool {
		ms := v.e.Messages(t)
		return len(ms) == 3 && !slices.ContainsFunc(ms, func(m storage.MessageDetail) bool {
			return len(m.Queue) != 1 || m.Queue[0].Status != storage.QueueDead
		})
	})

	for _, c := range []struct {
		path, role string
		code       int
	}{
		{"/outbounds/emr/resend-dead", "", http.StatusUnauthorized},
		{"/outbounds/emr/resend-dead", "viewer", http.StatusForbidden},
		{"/outbounds/nowhere/resend-dead", "operator", http.StatusNotFound},
		{"/outbounds/emr/resend-dead?limt=1", "operator", http.StatusBadRequest},
		{"/outbounds/emr/resend-dead?limit=0", "operator", http.StatusBadRequest},
		{"/outbounds/emr/resend-dead?limit=1&limit=2", "operator", http.StatusBadRequest},
		{"/outbounds/emr/resend-dead?since=yesterday", "operator", http.StatusBadRequest},
		{"/outbounds/emr/resend-dead?since=2026-11-27T10:00:00Z&until=2026-11-27T09:00:00Z", "operator", http.StatusBadRequest},
	} {
		code, body := v.call(t, "POST", c.path, c.role)
		var e struct{ Error string }
		if code != c.code || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Fatalf("POST %s as %q: %d %s, want %d with an error", c.path, c.role, code, body, c.code)
		}
	}
	if code, body := v.call(t, "GET", "/outbounds/emr/resend-dead", "operator"); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET of resend-dead: %d %s, want 405", code, body)
	}
	// A window that ends before they died resends none of them.
	code, body := v.call(t, "POST", "/outbounds/emr/resend-dead?until=2020-01-01T00:00:00Z", "operator")
	if none := enginetest.JSONShape(t, "resend-dead before they died", body, map[string]string{"outbound": "string", "resent": "number", "first_id": "null", "last_id": "null", "not_routed": "number", "unparsable": "number"}); code != http.StatusOK || none["resent"] != 0.0 {
		t.Fatalf("resend-dead with a window before the rows died: %d %s, want 200 and 0 resent", code, body)
	}

	dest.Reject.Store(false) // the destination's bug is fixed
	resend := func(query string) api.ResentDead {
		t.Helper()
		code, body := v.call(t, "POST", "/outbounds/emr/resend-dead"+query, "operator")
		if code != http.StatusOK {
			t.Fatalf("resend-dead%s: %d %s", query, code, body)
		}
		var out api.ResentDead
		if err := json.Unmarshal(body, &out); err != nil || out.Outbound != "emr" {
			t.Fatalf("resend-dead%s answered %s (%v)", query, body, err)
		}
		if out.Resent > 0 {
			enginetest.JSONShape(t, "resend-dead", body, resentDeadShape)
		}
		return out
	}
	first := resend("?limit=2&since=2020-01-01T00:00:00Z")
	if first.Resent != 2 || first.FirstID == nil || first.LastID == nil || *first.LastID <= *first.FirstID {
		t.Fatalf("resend-dead?limit=2: %+v, want 2 rows resent with their new ids", first)
	}
	rest := resend("")
	if rest.Resent != 1 || rest.FirstID == nil || *rest.FirstID <= *first.LastID {
		t.Fatalf("resend-dead of the rest: %+v, want the third row, queued after the first two (%d)", rest, *first.LastID)
	}
	enginetest.WaitFor(t, "the resent messages to be delivered", 10*time.Second, func() bool { return len(dest.Received()) >= 3 })
	if got := strings.Join(dest.Received(), ","); got != "D1,D2,D3" {
		t.Fatalf("delivered %s, want D1,D2,D3 (the dead rows' order)", got)
	}
	if again := resend(""); again.Resent != 0 || again.FirstID != nil || again.LastID != nil {
		t.Fatalf("resend-dead once every dead row is resent: %+v, want 0 and null ids", again)
	}
	// The dead rows stay (as a resend of one message leaves them), each now
	// followed by its message's delivered row (done once the lane records
	// the delivery the destination has seen).
	enginetest.WaitFor(t, "each message's dead row and a done one", 10*time.Second, func() bool {
		return !slices.ContainsFunc(v.e.Messages(t), func(m storage.MessageDetail) bool {
			return len(m.Queue) != 2 || m.Queue[0].Status != storage.QueueDead || m.Queue[1].Status != storage.QueueDone
		})
	})
	v.e.Store.ManagerCaughtUp(t)
	if len(dest.Received()) != 3 {
		t.Fatalf("delivered %v, want each message once more", dest.Received())
	}
	// GET /messages/{id} shows each dead row's resent_as, the id of the row
	// it was resent as, and null on a row not resent.
	resentAs := map[int64]int64{}
	for _, m := range v.e.Messages(t) {
		resentAs[m.Message.ID] = m.Queue[1].ID
	}
	for id, newRow := range resentAs {
		code, body := v.call(t, "GET", "/messages/"+strconv.FormatInt(id, 10), "operator")
		var got struct {
			Queue []json.RawMessage `json:"queue"`
		}
		if err := json.Unmarshal(body, &got); code != http.StatusOK || err != nil || len(got.Queue) != 2 {
			t.Fatalf("GET /messages/%d: %d %s", id, code, body)
		}
		shape := map[string]string{"id": "number", "destination": "string", "lane": "string", "status": "string", "held": "bool",
			"attempts": "number", "next_attempt_at": "number", "last_error": "string", "updated_at": "number"}
		shape["resent_as"] = "number"
		dead := enginetest.JSONShape(t, fmt.Sprintf("message %d's dead row", id), got.Queue[0], shape)
		shape["resent_as"] = "null"
		enginetest.JSONShape(t, fmt.Sprintf("message %d's new row", id), got.Queue[1], shape)
		if dead["resent_as"] != float64(newRow) {
			t.Fatalf("message %d's dead row: resent_as %v, want %d (its new row)", id, dead["resent_as"], newRow)
		}
	}
}

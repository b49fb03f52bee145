package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// store keeps m as the ingest would and returns its message id.
func (v *env) store(t *testing.T, m storage.NewMessage) int64 {
	t.Helper()
	res, err := v.e.Store.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: []storage.NewMessage{m}})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].MessageID
}

// routed is a message from adt_in with control id id for patient, queued
// for dest in lane dest/patient.
func routed(id, patient, dest string) storage.NewMessage {
	return storage.NewMessage{Inbound: "adt_in", ControlID: id, MessageType: "ADT^A01", Payload: []byte(enginetest.ADT(id, patient)),
		Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: dest, Lane: dest + "/" + patient}}}
}

func errorOf(t *testing.T, body []byte) string {
	t.Helper()
	var e struct{ Error string }
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Fatalf("error body %q is not {\"error\": ...}", body)
	}
	return e.Error
}

// GET /messages finds a message by control id, inbound, status and window,
// newest first, with its queue rows and never its payload, a page at a
// time; it needs MESSAGE_READ, and each bad parameter is a 400 that says
// what is wrong.
func TestMessageSearch(t *testing.T) {
	v := start(t, fileOutbound)
	var ids []int64
	for _, m := range []storage.NewMessage{routed("ABC123", "P1", "nowhere"), routed("OTHER1", "P2", "nowhere"), routed("ABC123", "P3", "nowhere"),
		{Inbound: "adt_in", ControlID: "BAD1", Payload: []byte("not hl7"), Status: storage.MessageRejected, Error: "no MSH"}} {
		ids = append(ids, v.store(t, m))
	}
	search := func(query string) api.MessageList {
		t.Helper()
		code, body := v.call(t, "GET", "/messages"+query, "operator")
		if code != http.StatusOK {
			t.Fatalf("GET /messages%s: %d %s", query, code, body)
		}
		if strings.Contains(string(body), "payload") || strings.Contains(string(body), "DOE^JANE") {
			t.Fatalf("GET /messages%s shows a payload: %s", query, body)
		}
		var l api.MessageList
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	idsOf := func(l api.MessageList) []int64 {
		var out []int64
		for _, m := range l.Messages {
			out = append(out, m.ID)
		}
		return out
	}

	// The shape, field for field.
	_, body := v.call(t, "GET", "/messages?control_id=ABC123&limit=1", "operator")
	top := enginetest.JSONShape(t, "GET /messages", body, map[string]string{"messages": "array", "since": "string", "until": "null", "next_before_id": "number"})
	first := top["messages"].([]any)[0].(map[string]any)
	enginetest.JSONShape(t, "a message of GET /messages", mustJSON(t, first), map[string]string{"id": "number", "inbound": "string", "received_at": "number",
		"control_id": "string", "message_type": "string", "status": "string", "error": "string", "queue": "array"})
	enginetest.JSONShape(t, "a queue row of GET /messages", mustJSON(t, first["queue"].([]any)[0]), map[string]string{"id": "number", "destination": "string", "status": "string"})

	l := search("?control_id=ABC123")
	if got, want := idsOf(l), []int64{ids[2], ids[0]}; !slices.Equal(got, want) || l.NextBeforeID != nil {
		t.Fatalf("by control id: %v next %v, want %v, newest first, and no next page", got, l.NextBeforeID, want)
	}
	if m := l.Messages[0]; m.Inbound != "adt_in" || m.Status != "routed" || m.ReceivedAt == nil || len(m.Queue) != 1 ||
		m.Queue[0].Destination != "nowhere" || m.Queue[0].Status != "pending" {
		t.Fatalf("a message found: %+v", m)
	}
	if since, err := time.Parse(time.RFC3339Nano, l.Since); err != nil || time.Since(since) < 23*time.Hour || time.Since(since) > 25*time.Hour || l.Until != nil {
		t.Fatalf("the default window: since %q until %v; want the last 24 hours", l.Since, l.Until)
	}
	if got := idsOf(search("?status=rejected")); !slices.Equal(got, []int64{ids[3]}) {
		t.Fatalf("by status: %v", got)
	}
	if got := idsOf(search("?inbound=adt_in&status=routed&control_id=OTHER1")); !slices.Equal(got, []int64{ids[1]}) {
		t.Fatalf("by inbound, status and control id: %v", got)
	}
	if got := idsOf(search("?until=" + url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339)))); len(got) != 0 {
		t.Fatalf("a window an hour ago: %v", got)
	}
	if got := idsOf(search("?since=" + url.QueryEscape(time.Now().Add(-time.Minute).Format(time.RFC3339)) + "&until=" + url.QueryEscape(time.Now().Add(time.Minute).Format("2006-01-02T15:04:05-07:00")))); len(got) != 4 {
		t.Fatalf("a window around now, with an offset: %v", got)
	}
	// Pages of two.
	p1 := search("?limit=2")
	if p1.NextBeforeID == nil || !slices.Equal(idsOf(p1), []int64{ids[3], ids[2]}) {
		t.Fatalf("page 1: %v next %v", idsOf(p1), p1.NextBeforeID)
	}
	p2 := search(fmt.Sprintf("?limit=2&before_id=%d&since=%s", *p1.NextBeforeID, url.QueryEscape(p1.Since)))
	if !slices.Equal(idsOf(p2), []int64{ids[1], ids[0]}) || p2.NextBeforeID != nil {
		t.Fatalf("page 2: %v next %v", idsOf(p2), p2.NextBeforeID)
	}

	for _, bad := range []struct{ query, says string }{
		{"?controlid=ABC123", `"controlid": unknown`},
		{"?control_id=A&control_id=B", "given 2 times"},
		{"?control_id=", "empty"},
		{"?status=done", "routed, unrouted or rejected"},
		{"?since=yesterday", "RFC 3339"},
		{"?since=2026-11-27T10:02:00+01:00", "%2B"},
		{"?until=2026-11-27T10:00:00Z&since=2026-11-27T11:00:00Z", "after since"},
		{"?limit=0", "1 to 1000"},
		{"?limit=1001", "1 to 1000"},
		{"?limit=ten", "1 to 1000"},
		{"?before_id=-1", "before_id"},
		{"?a=%zz", "does not parse"},
		{"?control_id=A%00", "NUL"},
		{"?inbound=%ff", "UTF-8"},
		{"?since=0001-01-01T00:00:00Z", "1970 or later"},
		{"?until=0001-01-01T00:00:00Z", "1970 or later"},
		{"?since=1969-12-31T23:59:59Z", "1970 or later"},
	} {
		code, body := v.call(t, "GET", "/messages"+bad.query, "operator")
		if code != http.StatusBadRequest || !strings.Contains(errorOf(t, body), bad.says) {
			t.Errorf("GET /messages%s: %d %s; want 400 saying %q", bad.query, code, body, bad.says)
		}
	}
	for role, want := range map[string]int{"": 401, "viewer": 403, "operator": 200, "admin": 200} {
		if code, body := v.call(t, "GET", "/messages", role); code != want {
			t.Errorf("GET /messages as %q: %d %s, want %d", role, code, body, want)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// POST /messages/{id}/resend refuses what it cannot resend, each with a
// status and what to do: a message not stored (404), one rejected or
// unrouted (409, never queued), a destination not in this node's config
// (422), one the message was never queued for (409), one the routes in
// force no longer send it to (409); a bad parameter is a 400, and a viewer
// may not resend.
func TestMessageResendRefusals(t *testing.T) {
	v := start(t, fileOutbound)
	orphan := v.store(t, routed("ORPH1", "P1", "nowhere")) // a destination gone from the config
	rejected := v.store(t, storage.NewMessage{Inbound: "adt_in", ControlID: "BAD1", Payload: []byte("not hl7"), Status: storage.MessageRejected, Error: "no MSH"})
	unrouted := v.store(t, storage.NewMessage{Inbound: "adt_in", ControlID: "UN1", Payload: []byte(enginetest.ADT("UN1", "P1")), Status: storage.MessageUnrouted})
	old := routed("OLD1", "P1", "emr")
	old.Inbound = "old_in" // no route from it any more
	oldIn := v.store(t, old)

	for _, c := range []struct {
		path string
		code int
		says string
	}{
		{"/messages/999999/resend", 404, "no message 999999"},
		{"/messages/x/resend", 400, "positive integer"},
		{fmt.Sprintf("/messages/%d/resend", rejected), 409, "rejected"},
		{fmt.Sprintf("/messages/%d/resend", unrouted), 409, "unrouted"},
		{fmt.Sprintf("/messages/%d/resend", orphan), 422, `"nowhere" is not an [[outbound]]`},
		{fmt.Sprintf("/messages/%d/resend?destination=lab", orphan), 422, `"lab" is not an [[outbound]]`},
		{fmt.Sprintf("/messages/%d/resend?destination=emr", orphan), 409, `never queued for "emr"`},
		{fmt.Sprintf("/messages/%d/resend", oldIn), 409, "no longer send"},
		{fmt.Sprintf("/messages/%d/resend?dest=emr", orphan), 400, `"dest": unknown`},
		{fmt.Sprintf("/messages/%d/resend?destination=", orphan), 400, "empty"},
	} {
		code, body := v.call(t, "POST", c.path, "operator")
		if code != c.code || !strings.Contains(errorOf(t, body), c.says) {
			t.Errorf("POST %s: %d %s; want %d saying %q", c.path, code, body, c.code, c.says)
		}
	}
	for _, role := range []string{"", "viewer"} {
		if code, body := v.call(t, "POST", fmt.Sprintf("/messages/%d/resend", orphan), role); code != map[string]int{"": 401, "viewer": 403}[role] {
			t.Errorf("a resend as %q: %d %s", role, code, body)
		}
	}
	d, err := v.e.Store.MessageRead(context.Background(), orphan)
	if err != nil || len(d.Queue) != 1 {
		t.Fatalf("a refused resend queued something: %+v %v", d.Queue, err)
	}
}

// No POST takes a body: its arguments are query parameters. A body it
// ignored widened the act (a resend given {"destination": ...} went to every
// destination): one is refused with a 400 and nothing is done, sent with a
// length or in chunks.
func TestAPostWithABodyIsRefused(t *testing.T) {
	v := start(t, fileOutbound)
	id := v.store(t, routed("BODY1", "P1", "emr"))
	for _, path := range []string{
		fmt.Sprintf("/messages/%d/resend", id), "/queue/1/retry", "/queue/1/skip", "/outbounds/emr/hold",
		"/outbounds/emr/release", "/outbounds/emr/resend-dead", "/config/reload",
	} {
		for _, chunked := range []bool{false, true} {
			var body io.Reader = strings.NewReader(`{"destination":"emr","limit":1}`)
			if chunked {
				body = io.MultiReader(body) // no length: sent in chunks
			}
			req, _ := http.NewRequest("POST", v.srv.URL+path, body)
			req.Header.Set("Authorization", "Bearer "+tokens["admin"])
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(errorOf(t, got), "takes no body, and nothing was done") {
				t.Errorf("POST %s with a body (chunked %v): %d %s; want 400, takes no body", path, chunked, resp.StatusCode, got)
			}
		}
	}
	d, err := v.e.Store.MessageRead(context.Background(), id)
	if err != nil || len(d.Queue) != 1 {
		t.Fatalf("a refused resend queued something: %+v %v", d.Queue, err)
	}
	if code, body := v.call(t, "POST", fmt.Sprintf("/messages/%d/resend", id), "operator"); code != 200 {
		t.Fatalf("the same resend without a body: %d %s", code, body)
	}
}

// A delivered message is resent by an operator: a new row in the lane its
// routes give it, delivered again, logged with the message, its control
// id, destination, new row and token, never the lane or the payload.
func TestMessageResendDeliversAgain(t *testing.T) {
	v := start(t, fileOutbound)
	var logs logbuf.Buffer
	srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: v.e.Status, Log: zerolog.New(&logs)}).Handler())
	t.Cleanup(srv.Close)
	v.srv = srv
	cl := enginetest.Dial(t, v.listen)
	cl.Send(enginetest.ADT("R1", "P1"))
	done := func(id int64) bool {
		d, err := v.e.Store.MessageRead(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range d.Queue {
			if q.ID == id {
				return q.Status == storage.QueueDone
			}
		}
		return false
	}
	enginetest.WaitFor(t, "message 1 delivered", 10*time.Second, func() bool { return done(1) })

	code, body := v.call(t, "POST", "/messages/1/resend", "operator")
	if code != http.StatusOK {
		t.Fatalf("resend: %d %s", code, body)
	}
	enginetest.JSONShape(t, "POST /messages/{id}/resend", body, map[string]string{"message_id": "number", "queue": "array"})
	var r api.Resent
	if err := json.Unmarshal(body, &r); err != nil || r.MessageID != 1 || len(r.Queue) != 1 || r.Queue[0].Destination != "emr" || r.Queue[0].ID <= 1 {
		t.Fatalf("resend answered %s", body)
	}
	enginetest.WaitFor(t, "the resent row delivered", 10*time.Second, func() bool { return done(r.Queue[0].ID) })
	d, _ := v.e.Store.MessageRead(context.Background(), 1)
	if len(d.Queue) != 2 || d.Queue[1].Lane != d.Queue[0].Lane || d.Queue[1].Lane != "emr/P1" {
		t.Fatalf("queue rows after the resend: %+v; want a second in lane emr/P1", d.Queue)
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "operator resend") {
			line = l
		}
	}
	want := fmt.Sprintf(`"message_id":1,"control_id":"R1","destination":"emr","queue_id":%d,"token":"operator-token"`, r.Queue[0].ID)
	if !strings.Contains(line, want) || strings.Contains(line, "P1") || strings.Contains(line, "MSH") {
		t.Fatalf("the resend's log line %q; want %s and no lane or payload", line, want)
	}
	// Again, naming the destination.
	if code, body := v.call(t, "POST", "/messages/1/resend?destination=emr", "admin"); code != http.StatusOK {
		t.Fatalf("resend to emr: %d %s", code, body)
	}
}

// A standby's API resends as the primary's does (and as retry and skip): on
// a clustered PostgreSQL store whose leader lease another node holds, the
// resend is not fenced, and the new row is at the tail of its lane, found
// by a search.
func TestAStandbyResendsAndSearches(t *testing.T) {
	url := pgtest.NewSchema(t)
	ctx := context.Background()
	st, err := postgres.Open(ctx, postgres.Options{URL: url, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l, ok, err := st.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "node-a", TTL: time.Minute})
	if err != nil || !ok {
		t.Fatalf("elect node-a: %v %v", ok, err)
	}
	primary := storage.Fence{Owner: "node-a", Term: l.Term}
	var queued []int64
	for _, id := range []string{"S1", "S2"} {
		res, err := st.MessageIngest(ctx, storage.MessageIngestParams{Fence: primary, Messages: []storage.NewMessage{routed(id, "P1", "emr")}})
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, res[0].QueueIDs[0])
	}
	cfg, err := config.Parse([]byte(tokenConfig()+`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:25001"

[[outbound]]
name = "emr"
type = "file"
directory = "`+t.TempDir()+`"

[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "PID-3.1"
`), "standby.toml")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.Options{Config: cfg, Store: st, Log: zerolog.New(zerolog.NewTestWriter(t))}).Handler())
	t.Cleanup(srv.Close)
	v := &env{srv: srv}
	code, body := v.call(t, "GET", "/messages?control_id=S1", "operator")
	var found api.MessageList
	if err := json.Unmarshal(body, &found); code != http.StatusOK || err != nil || len(found.Messages) != 1 {
		t.Fatalf("search on the standby: %d %s", code, body)
	}
	id := found.Messages[0].ID
	code, body = v.call(t, "POST", fmt.Sprintf("/messages/%d/resend", id), "operator")
	var r api.Resent
	if err := json.Unmarshal(body, &r); code != http.StatusOK || err != nil || len(r.Queue) != 1 || r.Queue[0].ID <= queued[1] {
		t.Fatalf("resend on the standby: %d %s; want a row after %v", code, body, queued)
	}
	d, err := st.MessageRead(ctx, id)
	if err != nil || len(d.Queue) != 2 || d.Queue[1].Lane != "emr/P1" || d.Queue[1].Status != storage.QueuePending {
		t.Fatalf("message %d's rows after the resend: %+v %v", id, d.Queue, err)
	}
}

// A node whose graph config differs from the primary's (mf_config_drift 1)
// refuses a resend and a resend-dead, 409 saying why and what to do: each
// computes the new row's lane from the answering node's routes, and one
// with another lane_key queued the message in a lane the primary does not
// make, out of order with the rest of its key. Once its config is the
// primary's again it resends.
func TestANodeWhoseConfigDriftedRefusesResends(t *testing.T) {
	v := start(t, fileOutbound)
	var drifted atomic.Bool
	drifted.Store(true)
	srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: v.e.Status,
		ConfigDrift: drifted.Load, Log: zerolog.New(zerolog.NewTestWriter(t))}).Handler())
	t.Cleanup(srv.Close)
	v.srv = srv
	enginetest.Dial(t, v.listen).Send(enginetest.ADT("R1", "P1"))
	rows := func() []storage.QueueRow {
		d, err := v.e.Store.MessageRead(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.Queue
	}
	enginetest.WaitFor(t, "message 1 delivered", 10*time.Second, func() bool {
		q := rows()
		return len(q) == 1 && q[0].Status == storage.QueueDone
	})
	for _, path := range []string{"/messages/1/resend", "/outbounds/emr/resend-dead"} {
		code, body := v.call(t, "POST", path, "operator")
		if e := errorOf(t, body); code != http.StatusConflict || !strings.Contains(e, "differs from the primary's") || !strings.Contains(e, "call the primary's API") {
			t.Errorf("POST %s on a node whose config drifted: %d %s; want 409 saying so", path, code, body)
		}
	}
	if q := rows(); len(q) != 1 {
		t.Fatalf("a refused resend queued something: %+v", q)
	}
	drifted.Store(false)
	if code, body := v.call(t, "POST", "/messages/1/resend", "operator"); code != http.StatusOK {
		t.Fatalf("resend once the config is the primary's: %d %s", code, body)
	}
	if code, body := v.call(t, "POST", "/outbounds/emr/resend-dead", "operator"); code != http.StatusOK {
		t.Fatalf("resend-dead once the config is the primary's: %d %s", code, body)
	}
}

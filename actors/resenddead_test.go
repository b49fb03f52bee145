package actors_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// resendToken is the operator token of the resend-dead test's node.
const resendToken = "resend-dead-test-operator-token"

// deadLettered is a config with an MLLP inbound on listen routed to the
// MLLP destination emr at dest, whose failed deliveries are set aside as
// dead at once, with route (lane_key, filter) added to its [[route]], and an
// operator token for the API.
func deadLettered(t *testing.T, listen, dest, route string) *config.Config {
	t.Helper()
	sum := sha256.Sum256([]byte(resendToken))
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
[[api.tokens]]
name = "ops"
role = "operator"
sha256 = %q

[[inbound]]
name = "adt_in"
type = "mllp"
listen = %q

[[outbound]]
name = "emr"
type = "mllp"
address = %q
timeout_seconds = 2
max_attempts = 1
on_exhausted = "dead"

[[route]]
from = "adt_in"
to = ["emr"]
%s
`, hex.EncodeToString(sum[:]), listen, dest, route)), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Dead rows set aside under one lane_key are resent after a reload that
// changed it: each new row goes to the tail of the lane the routes in
// force give its message now, as the ingest would queue it, not to the
// dead row's lane, which is a lane of the old lane_key (a row there is
// reported misplaced and delivered with no order against the patient's
// newer messages). A dead row whose message the routes in force no longer
// send to the outbound is not resent (the ingest would not queue it
// there): it stays dead, not marked, and the answer counts it.
func TestAResendDeadAfterALaneKeyReloadQueuesInTheNewLane(t *testing.T) {
	dest := startFlakyDestination(t)
	listen := enginetest.FreeAddr(t)
	started := deadLettered(t, listen, dest.addr, "")
	next := deadLettered(t, listen, dest.addr, "lane_key = \"PID-3.1\"\nfilter = { \"PID-3.1\" = \"P1\" }")
	var st storage.Store
	e := startScripted(t, started, func(o *actors.Options) {
		st = o.Store
		o.Reload = func() (*config.Config, error) { return next, nil }
	})
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "single-node"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(listen) })
	for _, m := range [][2]string{{"D1", "P1"}, {"D2", "P2"}} {
		if ack := enginetest.Dial(t, listen).Send(enginetest.ADT(m[0], m[1])); ack.Code != "AA" {
			t.Fatalf("%s answered %s; want AA", m[0], ack.Code)
		}
	}
	read := func(id int64) storage.MessageDetail {
		t.Helper()
		d, err := st.MessageRead(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	enginetest.WaitFor(t, "both rows to be set aside as dead", 10*time.Second, func() bool {
		return read(1).Queue[0].Status == storage.QueueDead && read(2).Queue[0].Status == storage.QueueDead
	})
	if lane := read(1).Queue[0].Lane; lane != "emr" {
		t.Fatalf("D1's dead row is in lane %q; want emr (no lane_key)", lane)
	}

	e.reload(t, 2) // lane_key PID-3.1, and only P1's messages go to emr
	enginetest.WaitFor(t, "the port to open after the reload", 10*time.Second, func() bool { return open(listen) })
	dest.down.Store(false)

	srv := httptest.NewServer(api.New(api.Options{Config: started, Store: st, Status: e.eng.Status, InForce: e.eng.Config, Log: zerolog.Nop()}).Handler())
	t.Cleanup(srv.Close)
	post := func(path string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+resendToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	code, body := post("/outbounds/emr/resend-dead")
	var got api.ResentDead
	if err := json.Unmarshal(body, &got); code != http.StatusOK || err != nil || got.FirstID == nil {
		t.Fatalf("resend-dead: %d %s; want D1's dead row resent", code, body)
	}
	d1 := read(1)
	if len(d1.Queue) != 2 || d1.Queue[1].ID != *got.FirstID || d1.Queue[0].ResentAs != *got.FirstID {
		t.Fatalf("D1's rows after resend-dead: %+v; want its dead row resent as %d", d1.Queue, *got.FirstID)
	}
	if lane := d1.Queue[1].Lane; lane != "emr/P1" {
		t.Fatalf("D1 resent in lane %q; want emr/P1, the lane of the lane_key in force (the dead row's was emr)", lane)
	}
	if got.Resent != 1 {
		t.Fatalf("resend-dead answered %s; want D1 alone resent (the routes in force send D2 nowhere)", body)
	}
	enginetest.WaitFor(t, "D1 to be delivered again", 10*time.Second, func() bool {
		return read(1).Queue[1].Status == storage.QueueDone
	})
	if got := dest.got(); len(got) != 1 || got[0] != "D1" {
		t.Fatalf("the destination accepted %v; want D1 once", got)
	}
	if strings.Contains(e.logs.String(), "lanes of another lane_key than its routes'") {
		t.Fatalf("the resent row was reported in a lane of another lane_key; logs:\n%s", e.logs.String())
	}
	var answer map[string]any
	_ = json.Unmarshal(body, &answer)
	if answer["not_routed"] != 1.0 {
		t.Fatalf("resend-dead answered %s; want \"not_routed\": 1 (D2, which the routes in force no longer send to emr)", body)
	}
	if d2 := read(2); len(d2.Queue) != 1 || d2.Queue[0].Status != storage.QueueDead || d2.Queue[0].ResentAs != 0 {
		t.Fatalf("D2's rows after resend-dead: %+v; want its dead row alone, not marked resent", d2.Queue)
	}

	// A resend of one message follows the routes in force as well.
	if code, body := post("/messages/1/resend"); code != http.StatusOK {
		t.Fatalf("resend of D1: %d %s", code, body)
	}
	if d1 := read(1); len(d1.Queue) != 3 || d1.Queue[2].Lane != "emr/P1" {
		t.Fatalf("D1's rows after its resend: %+v; want a third in lane emr/P1", d1.Queue)
	}
	if code, body := post("/messages/2/resend"); code != http.StatusConflict || !strings.Contains(string(body), "no longer send") {
		t.Fatalf("resend of D2, which no route sends to emr now: %d %s; want 409", code, body)
	}
}

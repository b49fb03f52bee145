package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/storage"
)

// Operators had only curl for POST /outbounds/{name}/resend-dead: mf
// resend-dead OUTBOUND calls it, with --since, --until and --limit passed
// on, and says in a line how many dead rows were queued again, and how many
// were left dead because no route in force sends their messages there; a
// second call says none was left.
func TestResendDeadOfAnOutbound(t *testing.T) {
	e, url := apiNodeWith(t, inboundRoutedTo(t, "emr"))
	t.Setenv(TokenEnv, apiTokens["operator"])
	ctx := context.Background()
	// Held, so that no lane delivers the rows before they are skipped.
	if _, err := e.Store.OutboundHold(ctx, storage.OutboundHoldParams{Outbound: "emr"}); err != nil {
		t.Fatal(err)
	}
	var ms []storage.NewMessage
	for i := range 3 {
		ms = append(ms, storage.NewMessage{Inbound: "in", ControlID: fmt.Sprintf("R%d", i), Payload: []byte(enginetest.ADT("R", "P1")),
			Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "emr", Lane: "emr/P1"}}})
	}
	res, err := e.Store.MessageIngest(ctx, storage.MessageIngestParams{Messages: ms})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if _, err := e.Store.QueueSkip(ctx, storage.QueueSkipParams{ID: r.QueueIDs[0], Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	// A message of an inbound no route comes from any more.
	gone, err := e.Store.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{Inbound: "gone_in", ControlID: "G",
		Payload: []byte(enginetest.ADT("G", "P2")), Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "emr", Lane: "emr/P2"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.QueueSkip(ctx, storage.QueueSkipParams{ID: gone[0].QueueIDs[0], Reason: "test"}); err != nil {
		t.Fatal(err)
	}

	out, err := runMF(t, "resend-dead", "--api", url, "--limit", "2", "--since", "2020-01-01T00:00:00Z", "emr")
	if err != nil || !strings.HasPrefix(out, `2 dead rows of outbound "emr" queued again, new queue ids `) || strings.Contains(out, "left dead") {
		t.Fatalf("mf resend-dead --limit 2 emr: %v, printed %q; want a line saying 2 were queued again, and their ids", err, out)
	}
	// One row is one row, with one id ("1 dead rows ..., new queue ids 6 to 6" before).
	out, err = runMF(t, "resend-dead", "--api", url, "emr")
	if err != nil || !strings.HasPrefix(out, `1 dead row of outbound "emr" queued again, new queue id `) || strings.Contains(out, "queue ids") {
		t.Fatalf("mf resend-dead emr with one dead row left: %v, printed %q; want a line saying it was queued again, and its id", err, out)
	}
	out, err = runMF(t, "resend-dead", "--api", url, "--json", "emr")
	if err != nil || !strings.Contains(out, `"resent": 0`) || !strings.Contains(out, `"not_routed": 1`) {
		t.Fatalf("mf resend-dead --json emr: %v, printed %q; want the API's JSON, none resent, gone_in's left", err, out)
	}
	out, err = runMF(t, "resend-dead", "--api", url, "emr")
	if want := `no dead row of outbound "emr" was resent; 1 left dead: no route in force sends their messages to "emr"`; err != nil || !strings.HasPrefix(out, want) {
		t.Fatalf("mf resend-dead emr once all that can be are resent: %v, printed %q; want %q", err, out, want)
	}
	out, err = runMF(t, "resend-dead", "--api", url, "--until", "2020-01-01T00:00:00Z", "emr")
	if err != nil || !strings.HasPrefix(out, `no dead row of outbound "emr" was left to resend`) {
		t.Fatalf("mf resend-dead --until 2020 emr: %v, printed %q; want none left", err, out)
	}
	if _, err := runMF(t, "resend-dead", "--api", url, "--limit", "0", "emr"); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("mf resend-dead --limit 0: %v; want the API's 400 about limit", err)
	}
	if _, err := runMF(t, "resend-dead", "--api", url, "nowhere"); err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("mf resend-dead nowhere: %v; want the API's 404 naming it", err)
	}
	if _, err := runMF(t, "resend-dead", "--api", url); err == nil || !strings.Contains(err.Error(), "OUTBOUND") {
		t.Fatalf("mf resend-dead without an outbound: %v; want its usage", err)
	}
}

package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// A query parameter on an operator POST that takes none is refused (400,
// nothing done), as an unknown parameter of GET /lanes, GET /messages,
// resend and resend-dead is: ignored, it widens the act the operator meant
// to narrow or bound (a hold "until" a time that holds for ever, a skip
// "of lane X" that skips whatever the id names).
func TestOperatorPostsRefuseQueryParameters(t *testing.T) {
	v := start(t, fileOutbound)
	rows := v.ingest(t, 1)
	for _, path := range []string{
		"/outbounds/emr/hold?until=2030-01-01T00:00:00Z",
		fmt.Sprintf("/queue/%d/skip?lane=nowhere/OTHER", rows[0]),
		fmt.Sprintf("/queue/%d/retry?max_attempts=1", rows[0]),
		"/outbounds/emr/release?after=1h",
	} {
		code, body := v.call(t, "POST", path, "operator")
		if code != http.StatusBadRequest {
			t.Errorf("POST %s: %d %s; want 400, nothing done", path, code, body)
		}
	}
	if held, err := v.e.Store.OutboundHolds(context.Background()); err != nil || len(held) != 0 {
		t.Fatalf("holds after the refused calls: %+v, %v; want none", held, err)
	}
	d, err := v.e.Store.MessageRead(context.Background(), 1)
	if err != nil || len(d.Queue) != 1 || d.Queue[0].Status != storage.QueuePending {
		t.Fatalf("the row after the refused calls: %+v, %v; want pending", d.Queue, err)
	}
}

// HEAD /messages/{id} shows no content: it is logged as a look-up, not in
// the PHI access log's words for a read whose content was shown.
func TestAHeadOfAMessageIsNotLoggedAsItsContentShown(t *testing.T) {
	v := start(t, fileOutbound)
	v.ingest(t, 1)
	logs := &enginetest.LogBuffer{}
	s := api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: v.e.Status, Log: zerolog.New(logs)})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodHead, srv.URL+"/messages/1", nil)
	req.Header.Set("Authorization", "Bearer "+tokens["operator"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD /messages/1: %d", resp.StatusCode)
	}
	if out := logs.String(); strings.Contains(out, "its content (PHI) was shown") || !strings.Contains(out, "message looked up (HEAD)") {
		t.Fatalf("HEAD showed nothing; want it logged as a look-up, not as content shown:\n%s", out)
	}
}

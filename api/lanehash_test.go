package api_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// lanesVia is GET /lanes on the API at url with the role's token.
func lanesVia(t *testing.T, url, role string) (int, []api.Lane) {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/lanes", nil)
	req.Header.Set("Authorization", "Bearer "+tokens[role])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Lanes []api.Lane }
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, body.Lanes
}

// oneLane is the name of the only lane GET /lanes lists.
func oneLane(t *testing.T, url, role string) string {
	t.Helper()
	code, ls := lanesVia(t, url, role)
	if code != http.StatusOK || len(ls) != 1 {
		t.Fatalf("GET /lanes as %s: %d, %+v; want 200 and one lane", role, code, ls)
	}
	return ls[0].Lane
}

func newServer(t *testing.T, v *env, st storage.Store) string {
	t.Helper()
	srv := httptest.NewServer(api.New(api.Options{Config: v.e.Config, Store: st, Status: v.e.Status,
		Log: zerolog.New(zerolog.NewTestWriter(t))}).Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

var viewerLaneName = regexp.MustCompile(`^nowhere/#[0-9a-f]{12}$`)

// A viewer sees a lane's name as the HMAC-SHA256 of it keyed by the
// cluster's secret, not the plain SHA-256 that anyone can recompute for
// every MRN; the same name on every request and from every server on the
// store. An operator sees the lane itself.
func TestViewerLaneHashIsKeyedAndStable(t *testing.T) {
	v := start(t, fileOutbound)
	v.ingest(t, 1) // lane nowhere/P9
	const lane = "nowhere/P9"

	first := oneLane(t, v.srv.URL, "viewer")
	if !viewerLaneName.MatchString(first) {
		t.Fatalf("a viewer sees %q, want nowhere/# and 12 hex digits", first)
	}
	plain := sha256.Sum256([]byte(lane))
	if first == "nowhere/#"+hex.EncodeToString(plain[:6]) {
		t.Fatalf("a viewer sees %q: the unkeyed SHA-256 of the lane, reversible by trying every MRN", first)
	}
	if again := oneLane(t, v.srv.URL, "viewer"); again != first {
		t.Fatalf("a second request shows %q, the first %q", again, first)
	}

	// The key is the one the server stored: a later call with another fresh
	// value gets it back.
	key, err := v.e.Store.Secret(context.Background(), api.LaneHashSecret, []byte("not the key"))
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != 32 || string(key) == "not the key" {
		t.Fatalf("the stored key is %d bytes (%q?); want the server's 32 random bytes", len(key), key)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(lane))
	if want := "nowhere/#" + hex.EncodeToString(mac.Sum(nil)[:6]); first != want {
		t.Fatalf("a viewer sees %q, want %q (HMAC-SHA256 keyed by the stored secret)", first, want)
	}

	// Another server on the same store (another node, or this one after a
	// restart) shows the same name.
	if other := oneLane(t, newServer(t, v, v.e.Store), "viewer"); other != first {
		t.Fatalf("another server shows %q, the first %q", other, first)
	}
	if got := oneLane(t, v.srv.URL, "operator"); got != lane {
		t.Fatalf("an operator sees %q, want the lane %q", got, lane)
	}
}

// The lane of the empty key (messages with no value at lane_key) is shown
// to a viewer as it is, "nowhere/": it has no key to hide (README, lane_key).
func TestAViewerSeesTheEmptyKeysLaneAsItIs(t *testing.T) {
	v := start(t, fileOutbound)
	if _, err := v.e.Store.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: []storage.NewMessage{
		{Inbound: "adt_in", ControlID: "E1", Payload: []byte("MSH|^~\\&|A\r"), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "nowhere", Lane: "nowhere/"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	if got := oneLane(t, v.srv.URL, "viewer"); got != "nowhere/" {
		t.Fatalf("a viewer sees the empty key's lane as %q, want nowhere/ (the README says so)", got)
	}
}

// secretStore fails Secret while fail is set, and counts its calls.
type secretStore struct {
	storage.Store
	fail  atomic.Bool
	calls atomic.Int64
}

func (s *secretStore) Secret(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	s.calls.Add(1)
	if s.fail.Load() {
		return nil, errors.New("store down")
	}
	return s.Store.Secret(ctx, name, fresh)
}

// Without its key, GET /lanes answers a viewer 503 as for any store failure,
// never an unkeyed hash, and tries again at the next request; once it has
// the key it asks the store no more.
func TestViewerLanesWaitForTheKey(t *testing.T) {
	v := start(t, fileOutbound)
	v.ingest(t, 1)
	st := &secretStore{Store: v.e.Store}
	st.fail.Store(true)
	url := newServer(t, v, st)

	for i := 0; i < 2; i++ {
		if code, ls := lanesVia(t, url, "viewer"); code != http.StatusServiceUnavailable {
			t.Fatalf("GET /lanes as a viewer without the key: %d %+v, want 503", code, ls)
		}
	}
	if n := st.calls.Load(); n != 2 {
		t.Fatalf("%d calls for the key in 2 failed requests, want 2 (one each)", n)
	}
	if got := oneLane(t, url, "operator"); got != "nowhere/P9" {
		t.Fatalf("an operator, who needs no key, sees %q", got)
	}

	st.fail.Store(false)
	first := oneLane(t, url, "viewer")
	if !viewerLaneName.MatchString(first) {
		t.Fatalf("a viewer sees %q once the store is back", first)
	}
	st.fail.Store(true) // the key is cached: the store is not asked again
	if again := oneLane(t, url, "viewer"); again != first {
		t.Fatalf("with the key cached a viewer sees %q, before %q", again, first)
	}
	if n := st.calls.Load(); n != 3 {
		t.Fatalf("%d calls for the key, want 3 (two failed, one that took)", n)
	}
}

// clockSteppedBackStore answers QueueLanes as a store whose clock was
// stepped back an hour after the rows were queued would: their heads'
// ages come out negative.
type clockSteppedBackStore struct{ storage.Store }

func (s clockSteppedBackStore) QueueLanes(ctx context.Context, p storage.QueueLanesParams) ([]storage.LaneSummary, error) {
	ls, err := s.Store.QueueLanes(ctx, p)
	for i := range ls {
		ls[i].HeadAge -= time.Hour
	}
	return ls, err
}

// A head's age is never shown negative, even when the database's clock was
// stepped back after the row was queued: it has been queued for no time
// that can be told, so 0 (the lanes still use the raw figure to convert the
// database's times to the node's).
func TestAHeadsAgeIsNeverNegative(t *testing.T) {
	v := start(t, fileOutbound)
	v.ingest(t, 1) // lane nowhere/P9
	code, ls := lanesVia(t, newServer(t, v, clockSteppedBackStore{v.e.Store}), "operator")
	if code != http.StatusOK || len(ls) != 1 {
		t.Fatalf("GET /lanes: %d, %+v; want 200 and one lane", code, ls)
	}
	if ls[0].HeadAge != 0 {
		t.Fatalf("head_age_seconds %v after the database's clock stepped back; want 0", ls[0].HeadAge)
	}
}

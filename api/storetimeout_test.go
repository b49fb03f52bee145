package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// silentStore is a database that accepts connections and never answers (a
// host that drops packets, a pool whose connections are all stuck): every
// call the API makes waits until its context ends.
type silentStore struct{ storage.Store }

func (silentStore) NodeList(ctx context.Context) (storage.NodeList, error) {
	<-ctx.Done()
	return storage.NodeList{}, ctx.Err()
}

func (silentStore) LeaseRead(ctx context.Context) (storage.Lease, error) {
	<-ctx.Done()
	return storage.Lease{}, ctx.Err()
}

func (silentStore) QueueLanes(ctx context.Context, _ storage.QueueLanesParams) ([]storage.LaneSummary, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (silentStore) QueueStats(ctx context.Context) ([]storage.QueueStat, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (silentStore) MessageRead(ctx context.Context, id int64) (storage.MessageDetail, error) {
	<-ctx.Done()
	return storage.MessageDetail{}, ctx.Err()
}

func (silentStore) QueueRelease(ctx context.Context, p storage.QueueReleaseParams) (storage.QueueActed, error) {
	<-ctx.Done()
	return storage.QueueActed{}, ctx.Err()
}

func (silentStore) QueueSkip(ctx context.Context, p storage.QueueSkipParams) (storage.QueueActed, error) {
	<-ctx.Done()
	return storage.QueueActed{}, ctx.Err()
}

func (silentStore) ConfigVersionBump(ctx context.Context, p storage.ConfigVersionBumpParams) (int64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// While the database does not answer, every endpoint that reads or writes
// it answers by itself within its own limit (here divided by 100), instead
// of holding the request until the client gives up: a monitoring check
// gets a 503 that says the store did not answer, and /metrics still serves
// everything, the queue gauges at their last values (mf_is_leader,
// mf_store_errors_total are what an alert needs then). Before, the store
// call had no deadline but the client's: every one of these timed out in
// the client.
func TestAnUnansweringStoreIsAnsweredFor(t *testing.T) {
	v := start(t, fileOutbound)
	clustered := func() actors.Status { s := v.e.Status(); s.Clustered = true; return s }
	s := api.NewWithLimitsDividedBy(api.Options{Config: v.e.Config, Store: silentStore{v.e.Store}, Status: clustered,
		Log: zerolog.New(zerolog.NewTestWriter(t))}, 100)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	// Far above the divided limits (and the undivided ones): a client that
	// has to give up is the failure.
	client := &http.Client{Timeout: 30 * time.Second}
	cases := []struct {
		method, path, role string
		want               int
	}{
		{"GET", "/cluster/nodes", "viewer", http.StatusServiceUnavailable},
		{"GET", "/lanes", "viewer", http.StatusServiceUnavailable},
		{"GET", "/lanes", "operator", http.StatusServiceUnavailable},
		{"GET", "/messages/1", "operator", http.StatusServiceUnavailable},
		{"POST", "/queue/1/retry", "operator", http.StatusServiceUnavailable},
		{"POST", "/queue/1/skip", "operator", http.StatusServiceUnavailable},
		{"POST", "/config/reload", "admin", http.StatusServiceUnavailable},
		{"GET", "/metrics", "viewer", http.StatusOK},
	}
	for _, c := range cases {
		t.Run(c.method+c.path+"/"+c.role, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
			req.Header.Set("Authorization", "Bearer "+tokens[c.role])
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s as %s with the store silent: %v", c.method, c.path, c.role, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("%s %s as %s with the store silent: %d %s, want %d", c.method, c.path, c.role, resp.StatusCode, body, c.want)
			}
			if c.want == http.StatusOK {
				// The queue gauges too, at their last values (the README).
				for _, series := range []string{"mf_is_leader ", "mf_queue_depth{", "mf_lanes_blocked "} {
					if !strings.Contains(string(body), series) {
						t.Fatalf("%s %s with the store silent: no %s in %q", c.method, c.path, series, body)
					}
				}
				return
			}
			var e struct{ Error string }
			if json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, "did not answer") {
				t.Fatalf("%s %s with the store silent: %s; want an error that says the store did not answer", c.method, c.path, body)
			}
			// A write given up on may have been committed all the same: the
			// operator must look before doing it again.
			if c.method == "POST" && !strings.Contains(e.Error, "it may still have been applied") {
				t.Fatalf("%s %s with the store silent: %s; want an error that says the write may still have been applied", c.method, c.path, body)
			}
		})
	}
}

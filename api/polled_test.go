package api_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// awayStore is a database away while away is set: every call the polled
// endpoints make fails at once.
type awayStore struct {
	storage.Store
	away atomic.Bool
}

var errAway = errors.New("injected: connection refused")

func (s *awayStore) Ping(ctx context.Context) error {
	if s.away.Load() {
		return errAway
	}
	return s.Store.Ping(ctx)
}

func (s *awayStore) QueueStats(ctx context.Context) ([]storage.QueueStat, error) {
	if s.away.Load() {
		return nil, errAway
	}
	return s.Store.QueueStats(ctx)
}

// GET /ready and GET /metrics are polled by machines (a readiness probe, a
// load balancer, Prometheus): with the database away each one was a WARN
// line, every probe and every scrape, for as long as it lasted. Each is
// logged when it starts failing, once a minute while it fails, and when it
// works again.
func TestPolledEndpointsLogADatabaseAwayWhenItStartsAndEnds(t *testing.T) {
	v := start(t, fileOutbound)
	store := &awayStore{Store: v.e.Store}
	store.away.Store(true)
	var logs enginetest.LogBuffer
	s := api.New(api.Options{Config: v.e.Config, Store: store, Status: v.e.Status, Log: zerolog.New(&logs)})
	get := func(path string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+tokens["viewer"])
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
	const polls = 20
	for range polls {
		if code := get("/ready"); code != http.StatusServiceUnavailable {
			t.Fatalf("/ready with the database away: %d", code)
		}
		get("/metrics")
	}
	store.away.Store(false)
	if code := get("/ready"); code != http.StatusOK {
		t.Fatalf("/ready with the database back: %d", code)
	}
	get("/metrics")
	got := logs.String()
	if n := strings.Count(got, `"level":"warn"`); n != 2 || strings.Count(got, "again") != 2 {
		t.Fatalf("%d probes and %d scrapes with the database away logged %d WARN lines; want one each, and one each when it is back:\n%s",
			polls, polls, n, got)
	}
}

package api_test

import (
	"context"
	"errors"
	"fmt"
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
	store, logs, get := serveWithTheDatabaseAway(t, "viewer")
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

func (s *awayStore) QueueLanes(ctx context.Context, p storage.QueueLanesParams) ([]storage.LaneSummary, error) {
	if s.away.Load() {
		return nil, errAway
	}
	return s.Store.QueueLanes(ctx, p)
}

func (s *awayStore) MessageRead(ctx context.Context, id int64) (storage.MessageDetail, error) {
	if s.away.Load() {
		return storage.MessageDetail{}, errAway
	}
	return s.Store.MessageRead(ctx, id)
}

// A dashboard polls GET /lanes and GET /messages/{id} as a probe polls
// /ready: with the database away each request was an ERROR line. Reads are
// logged when they start failing, once a minute while they fail, and when
// one works again; each is still answered 503.
func TestPolledReadsLogADatabaseAwayWhenItStartsAndEnds(t *testing.T) {
	store, logs, get := serveWithTheDatabaseAway(t, "admin") // messages are not a viewer's
	const polls = 20
	for range polls {
		for _, path := range []string{"/lanes", "/messages/1"} {
			if code := get(path); code != http.StatusServiceUnavailable {
				t.Fatalf("%s with the database away: %d", path, code)
			}
		}
	}
	store.away.Store(false)
	// The store answers again: a lane list, and no message 1 (a 404 is
	// the store's answer too).
	if code := get("/lanes"); code != http.StatusOK {
		t.Fatalf("/lanes with the database back: %d", code)
	}
	if code := get("/messages/1"); code != http.StatusNotFound {
		t.Fatalf("/messages/1 with the database back: %d", code)
	}
	got := logs.String()
	if n := strings.Count(got, `"level":"error"`); n != 1 || strings.Count(got, "again") != 1 {
		t.Fatalf("%d polls of two reads with the database away logged %d ERROR lines; want one, and one line when reads work again:\n%s",
			polls, n, got)
	}
}

// serveWithTheDatabaseAway serves the API of an engine whose store is away
// (until the test sets store.away false), logging into logs; get answers a
// GET of path with the token of role.
func serveWithTheDatabaseAway(t *testing.T, role string) (store *awayStore, logs *enginetest.LogBuffer, get func(path string) int) {
	v := start(t, fileOutbound)
	store, logs = &awayStore{Store: v.e.Store}, &enginetest.LogBuffer{}
	store.away.Store(true)
	s := api.New(api.Options{Config: v.e.Config, Store: store, Status: v.e.Status, Log: zerolog.New(logs)})
	return store, logs, func(path string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+tokens[role])
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
}

// readOnlyStore answers reads, and its ping says the database takes no
// writes, as a standby's does.
type readOnlyStore struct{ storage.Store }

func (s *readOnlyStore) Ping(ctx context.Context) error {
	return fmt.Errorf("postgres: ping: %w: point [store] url at the primary", storage.ErrReadOnly)
}

// A read-only database (a standby, after a managed failover) answers the
// ping's read, and /ready said the store was "unreachable or not migrated",
// which sent an operator to the network. It says the store is read-only.
func TestReadySaysTheStoreIsReadOnly(t *testing.T) {
	v := start(t, fileOutbound)
	s := api.New(api.Options{Config: v.e.Config, Store: &readOnlyStore{v.e.Store}, Status: v.e.Status, Log: zerolog.Nop()})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ready", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "read-only") {
		t.Fatalf("/ready on a read-only database: %d %s; want 503 saying the store is read-only", rec.Code, rec.Body.String())
	}
}

// statsCountingStore counts the QueueStats reads.
type statsCountingStore struct {
	storage.Store
	reads atomic.Int64
}

func (s *statsCountingStore) QueueStats(ctx context.Context) ([]storage.QueueStat, error) {
	s.reads.Add(1)
	return s.Store.QueueStats(ctx)
}

// Each scrape of GET /metrics counted every unfinished row in the database
// (0.3 to 2.9 s with 500,000 of them). Scrapes close together share one
// read, for at most a few seconds (the queue gauges are that much behind
// at most); an operator's action through the node reads afresh.
func TestScrapesCloseTogetherReadTheQueueOnce(t *testing.T) {
	v := start(t, fileOutbound)
	store := &statsCountingStore{Store: v.e.Store}
	s := api.New(api.Options{Config: v.e.Config, Store: store, Status: v.e.Status, Log: zerolog.Nop()})
	for range 3 {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+tokens["viewer"])
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "mf_queue_depth{") {
			t.Fatalf("/metrics: %d", rec.Code)
		}
	}
	if n := store.reads.Load(); n != 1 {
		t.Fatalf("3 scrapes in a row read the queue counts %d times; want once", n)
	}
}

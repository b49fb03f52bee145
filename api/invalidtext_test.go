package api_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// textStore refuses text parameters PostgreSQL refuses (invalid UTF-8, a
// NUL character) with an error of the store, as PostgreSQL's driver does.
type textStore struct{ storage.Store }

var errText = errors.New("ERROR: invalid byte sequence for encoding \"UTF8\" (SQLSTATE 22021)")

func refusedText(texts ...string) bool {
	for _, s := range texts {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return true
		}
	}
	return false
}

func (s textStore) MessageSearch(ctx context.Context, p storage.MessageSearchParams) ([]storage.MessageSummary, error) {
	if refusedText(p.ControlID, p.Inbound, p.Status) {
		return nil, errText
	}
	return s.Store.MessageSearch(ctx, p)
}

func (s textStore) OutboundRelease(ctx context.Context, p storage.OutboundReleaseParams) (bool, error) {
	if refusedText(p.Outbound) {
		return false, errText
	}
	return s.Store.OutboundRelease(ctx, p)
}

// A search or a release with text no store can hold is the client's
// error, answered 400 or 404 before the store is asked. Before, PostgreSQL
// refused the parameter, and the request was answered 503 "the store is
// unavailable", with an ERROR line asking whether the database was
// reachable.
func TestTextNoStoreCanHoldIsTheClientsError(t *testing.T) {
	v := start(t, fileOutbound)
	s := api.New(api.Options{Config: v.e.Config, Store: textStore{v.e.Store}, Status: v.e.Status,
		Log: zerolog.New(zerolog.NewTestWriter(t))})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/messages?control_id=%00", http.StatusBadRequest},
		{"GET", "/messages?control_id=A%00B", http.StatusBadRequest},
		{"GET", "/messages?inbound=%ff", http.StatusBadRequest},
		{"POST", "/outbounds/%ff/release", http.StatusNotFound},
		{"POST", "/outbounds/a%00/release", http.StatusNotFound},
		{"GET", "/messages?control_id=%C3%A9", http.StatusOK}, // é: valid text is searched
		{"POST", "/outbounds/emr/release", http.StatusOK},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		req.Header.Set("Authorization", "Bearer "+tokens["operator"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}
}

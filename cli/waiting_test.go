package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
)

// waitingNode runs mf run on a PostgreSQL url nobody answers (a database
// still booting), so that the node waits for it, and returns its API's
// address; the run is stopped, and its return waited for, when the test
// ends.
func waitingNode(t *testing.T, clustered bool) string {
	t.Helper()
	sha, adminSHA := sha256.Sum256([]byte(waitingToken)), sha256.Sum256([]byte(waitingAdminToken))
	dir := t.TempDir()
	api := enginetest.FreeAddr(t)
	cfg := "[store]\nbackend = \"postgres\"\npool_size = 3\nurl = \"postgres://mf@" + enginetest.FreeAddr(t) + "/mf?sslmode=disable\"\n"
	if clustered {
		cfg += "[cluster]\nenabled = true\n"
	}
	cfg += "[api]\nlisten = \"" + api + "\"\nmetrics_public = true\n" +
		"[[api.tokens]]\nname = \"viewer\"\nrole = \"viewer\"\nsha256 = \"" + hex.EncodeToString(sha[:]) + "\"\n" +
		"[[api.tokens]]\nname = \"admin\"\nrole = \"admin\"\nsha256 = \"" + hex.EncodeToString(adminSHA[:]) + "\"\n"
	path := filepath.Join(dir, "mf.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out enginetest.LogBuffer // the API and the wait log at once
	go func() { done <- App(&out, &out).RunContext(ctx, []string{"mf", "run", "--config", path}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("mf run stopped while waiting: %v\n%s", err, out.String())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("mf run did not stop within 10s of its cancellation")
		}
	})
	enginetest.WaitFor(t, "the API of the waiting node", 10*time.Second, func() bool {
		resp, err := http.Get("http://" + api + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return api
}

// waitingToken and waitingAdminToken are the viewer and admin tokens of
// waitingNode's API.
const (
	waitingToken      = "mf_waiting-node-viewer"
	waitingAdminToken = "mf_waiting-node-admin"
)

func get(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+waitingToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// A node waiting for its database exports mf_is_leader and mf_leader_term
// at 0. They were registered only once the engine started, so while every
// node of a site waited for its database (after a power cut) the scrapes
// had no mf_is_leader at all: an alert on sum(mf_is_leader) < 1, the one
// that says no node leads, had no series to fire on.
func TestANodeWaitingForItsDatabaseExportsItLeadsNot(t *testing.T) {
	// One node at a time: each subtest's end stops its node.
	for _, clustered := range []bool{true, false} {
		t.Run(fmt.Sprintf("clustered=%v", clustered), func(t *testing.T) {
			api := waitingNode(t, clustered)
			body := get(t, "http://"+api+"/metrics")
			for _, want := range []string{"mf_is_leader 0\n", "mf_leader_term 0\n"} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics of a node waiting for its database has no line %q", strings.TrimSpace(want))
				}
			}
		})
	}
}

// A node waiting for its database says on /cluster/status that it does
// not lead, as README says and mf_is_leader does: a single node (cluster
// disabled, on PostgreSQL) said is_leader true, running no graph.
func TestANodeWaitingForItsDatabaseSaysItDoesNotLead(t *testing.T) {
	for _, clustered := range []bool{true, false} {
		t.Run(fmt.Sprintf("clustered=%v", clustered), func(t *testing.T) {
			api := waitingNode(t, clustered)
			var st struct {
				IsLeader *bool `json:"is_leader"`
			}
			body := get(t, "http://"+api+"/cluster/status")
			if err := json.Unmarshal([]byte(body), &st); err != nil || st.IsLeader == nil || *st.IsLeader {
				t.Errorf("/cluster/status of a node waiting for its database: %s; want is_leader false", body)
			}
		})
	}
}

// POST /config/reload on a clustered node waiting for its database is a 503
// with Retry-After, saying the node is still starting: it was the 422 of a
// config file that cannot be reloaded, though nothing was wrong with it.
func TestAReloadThroughANodeWaitingForItsDatabaseIsUnavailable(t *testing.T) {
	api := waitingNode(t, true)
	req, _ := http.NewRequest(http.MethodPost, "http://"+api+"/config/reload", nil)
	req.Header.Set("Authorization", "Bearer "+waitingAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "still starting") {
		t.Fatalf("POST /config/reload on a node waiting for its database: %d (Retry-After %q) %s; want 503 with Retry-After, saying it is still starting",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

package actors_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// holdToken is the operator token of the hold test's nodes.
const holdToken = "hold-test-operator-token"

// heldConfig is the hold test's config: an HTTP outbound "emr" and an
// operator token for the API.
func heldConfig(t *testing.T, listen, dest string) *config.Config {
	t.Helper()
	sum := sha256.Sum256([]byte(holdToken))
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
type = "http"
url = %q

[[route]]
from = "adt_in"
to = ["emr"]
`, hex.EncodeToString(sum[:]), listen, dest)), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Two nodes on one PostgreSQL database, each with its own connections: an
// operator holds the outbound through the standby's API, and the primary
// sends nothing more while it still acknowledges and queues every message.
// The primary fails over to the standby, which finds the hold and sends
// nothing either; the release (on the new primary's API) delivers every
// queued message, in order.
func TestAHoldFromAStandbyStopsThePrimaryAndOutlivesAFailover(t *testing.T) {
	url := pgtest.NewSchema(t)
	connect := func() *enginetest.FaultStore {
		s, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return &enginetest.FaultStore{Store: s}
	}
	stA, stB := connect(), connect()
	if err := stA.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	elect := func(owner string) storage.Fence { return electOn(t, stA, owner) }
	dest := enginetest.StartHTTPDestination(t)
	listen := enginetest.FreeAddr(t)
	cfg := heldConfig(t, listen, dest.URL)
	send := func(id string) {
		t.Helper()
		if ack := enginetest.Dial(t, listen).Send(enginetest.ADT(id, "P1")); ack.Code != "AA" {
			t.Fatalf("%s answered %s; want AA", id, ack.Code)
		}
	}

	a := startNodeOn(t, stA, "a", cfg)
	a.tell(leadership.Changed{Leader: true, Fence: elect("a"), Reason: "elected"})
	enginetest.WaitFor(t, "a's port to open", 10*time.Second, func() bool { return open(listen) })
	b := startNodeOn(t, stB, "b", cfg) // a standby: it is never told it leads, until the failover
	aStopped := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(a.logs.String(), b.logs.String())
		}
		if !aStopped {
			a.stop(t)
		}
		b.stop(t)
	})
	apiB := httptest.NewServer(api.New(api.Options{Config: cfg, Store: stB, Status: b.eng.Status, Log: zerolog.Nop()}).Handler())
	t.Cleanup(apiB.Close)
	post := func(path string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, apiB.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+holdToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s on the standby's API: %d", path, resp.StatusCode)
		}
	}

	send("D1")
	enginetest.WaitFor(t, "the primary to deliver D1", 10*time.Second, func() bool { return len(dest.Received()) == 1 })
	if b.eng.Status().Leader {
		t.Fatal("b leads; want it a standby")
	}
	post("/outbounds/emr/hold")
	stA.ManagerCaughtUp(t)
	send("D2")
	send("D3")
	stA.ManagerCaughtUp(t)
	if got := dest.Received(); !slices.Equal(got, []string{"D1"}) {
		t.Fatalf("the primary sent %v after a hold made on the standby; want only D1, sent before it", got)
	}

	a.stop(t)
	aStopped = true
	b.tell(leadership.Changed{Leader: true, Fence: elect("b"), Reason: "elected"})
	enginetest.WaitFor(t, "b's port to open", 10*time.Second, func() bool { return open(listen) })
	send("D4")
	stB.ManagerCaughtUp(t)
	if got := dest.Received(); !slices.Equal(got, []string{"D1"}) {
		t.Fatalf("the new primary sent %v of an outbound held before the failover; want nothing more than D1", got)
	}
	post("/outbounds/emr/release")
	enginetest.WaitFor(t, "the held messages delivered after the release", 20*time.Second, func() bool { return len(dest.Received()) == 4 })
	if got := dest.Received(); !slices.Equal(got, []string{"D1", "D2", "D3", "D4"}) {
		t.Fatalf("delivered %v; want D1, D2, D3, D4 in order", got)
	}
}

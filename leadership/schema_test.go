package leadership_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// countingStore counts the schema checks and heartbeats an elector makes.
type countingStore struct {
	storage.Store
	checks, beats atomic.Int64
}

func (c *countingStore) SchemaCheck(ctx context.Context) error {
	c.checks.Add(1)
	return c.Store.SchemaCheck(ctx)
}

func (c *countingStore) NodeHeartbeat(ctx context.Context, p storage.NodeHeartbeatParams) error {
	c.beats.Add(1)
	return c.Store.NodeHeartbeat(ctx, p)
}

const olderThanSchema = "this node's mf is older than its database's schema"

// A running node whose database a newer mf migrates (mf migrate during a
// rolling upgrade) said nothing: it warns once, within its schema check
// period, that it must be upgraded, and not before.
func TestANodeWarnsOnceWhenANewerMfMigratesItsDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewSchema(t)
	logs := &enginetest.LogBuffer{}
	st := &countingStore{Store: openStore(t, url)}
	n := &node{id: "a", trust: leadership.NewTrust(), events: make(chan any, 64), system: actor.NewActorSystem()}
	props := leadership.NewElector(leadership.ElectorOptions{
		Store: st, Cluster: fast, NodeID: "a", Trust: n.trust, Log: zerolog.New(logs),
		SchemaCheckInterval: 100 * time.Millisecond,
	})
	n.pid = n.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &probe{props: props, events: n.events} }))
	t.Cleanup(n.stop)
	n.wantChanged(t, 5*time.Second, true, "elected")
	enginetest.WaitFor(t, "two schema checks", 10*time.Second, func() bool { return st.checks.Load() >= 2 })
	if strings.Contains(logs.String(), olderThanSchema) {
		t.Fatalf("warned on the schema this mf migrated:\n%s", logs.String())
	}

	// A newer mf's migrate records a migration this build lacks.
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "INSERT INTO mf_schema_migrations (version, name) VALUES (9999, '9999_from_a_newer_mf')"); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "the WARN that this mf is older than the schema", 10*time.Second, func() bool {
		return strings.Contains(logs.String(), olderThanSchema)
	})
	beats := st.beats.Load()
	enginetest.WaitFor(t, "five more heartbeats", 10*time.Second, func() bool { return st.beats.Load() >= beats+5 })
	var warns []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, olderThanSchema) {
			warns = append(warns, l)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], `"level":"warn"`) || !strings.Contains(warns[0], "[9999]") || !strings.Contains(warns[0], "upgrade mf on this node") {
		t.Fatalf("want one WARN naming migration 9999 and saying to upgrade; got:\n%s", strings.Join(warns, "\n"))
	}
}

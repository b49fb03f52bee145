package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// Two single nodes on one schema: the second is refused, naming the first's
// session, until the first lets the lock go. Both led before, each with the
// zero fence every process passes.
func TestASecondSingleNodeOnASchemaIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewSchema(t)
	postgres.SetSingleNodeStartWait(t, 0)
	first := singleNodeStore(t, ctx, url, "mf first")
	if _, err := first.HoldSingleNode(ctx); err != nil {
		t.Fatal(err)
	}
	second := singleNodeStore(t, ctx, url, "mf second")
	_, err := second.HoldSingleNode(ctx)
	if !errors.Is(err, postgres.ErrSingleNodeTaken) || !strings.Contains(err.Error(), `application_name "mf first"`) || !strings.Contains(err.Error(), "enable [cluster]") {
		t.Fatalf("a second single node: %v; want ErrSingleNodeTaken naming mf first's session", err)
	}
	// Another schema is another store.
	if _, err := singleNodeStore(t, ctx, pgtest.NewSchema(t), "mf elsewhere").HoldSingleNode(ctx); err != nil {
		t.Fatalf("a single node on another schema: %v", err)
	}
	// Started while the first still stops (a restart that overlaps), a
	// node waits for the lock rather than fail at once.
	postgres.SetSingleNodeStartWait(t, 20*time.Second)
	took := make(chan error, 1)
	go func() {
		_, err := second.HoldSingleNode(ctx)
		took <- err
	}()
	first.Close()
	if err := <-took; err != nil {
		t.Fatalf("the second single node, waiting while the first closed: %v", err)
	}
}

// A single node whose lock session drops takes the lock again; if another
// process took it meanwhile, the node is told (the channel) and the store
// refuses its writes from then on.
func TestASingleNodeWhoseLockWasTakenMeanwhileStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewSchema(t)
	postgres.SetSingleNodeStartWait(t, 0)
	first := singleNodeStore(t, ctx, url, "mf first")
	lost, err := first.HoldSingleNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	// Its session dropped (as at a restart of the database) and, before it
	// looks again, another process takes the lock.
	second := singleNodeStore(t, ctx, url, "mf second")
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'mf first' AND pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory')"); err != nil {
		t.Fatal(err)
	}
	until(t, "the second single node to take the lock", func() bool {
		_, err := second.HoldSingleNode(ctx)
		return err == nil
	})
	select {
	case err := <-lost:
		if !errors.Is(err, postgres.ErrSingleNodeTaken) {
			t.Fatalf("the first single node was told %v; want ErrSingleNodeTaken", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first single node was not told that another took its lock")
	}
	_, err = first.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{Inbound: "in", ControlID: "C1", Payload: []byte("MSH|"), Status: storage.MessageRouted}}})
	if !errors.Is(err, postgres.ErrSingleNodeTaken) {
		t.Fatalf("an ingest of the first single node after it lost its lock: %v; want refused", err)
	}
	if _, err := second.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{Inbound: "in", ControlID: "C2", Payload: []byte("MSH|"), Status: storage.MessageRouted}}}); err != nil {
		t.Fatalf("an ingest of the second: %v", err)
	}
}

// singleNodeStore opens a migrated store on url as a single node's, its
// sessions named name.
func singleNodeStore(t *testing.T, ctx context.Context, url, name string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(ctx, postgres.Options{URL: url, PoolSize: 2, ApplicationName: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

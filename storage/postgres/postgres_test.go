package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
	"github.com/messagefoundry/mf/storage/storagetest"
)

// opener gives each test its own schema; every handle is its own pool.
func opener(t testing.TB) func() storage.Store {
	url := pgtest.NewSchema(t)
	return func() storage.Store {
		s, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 4})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

func TestConformancePostgres(t *testing.T) { storagetest.Run(t, opener) }

func BenchmarkPostgres(b *testing.B) { storagetest.Bench(b, opener) }

// A resignation reaches a follower's watcher at once, and one in another
// schema (another cluster) does not.
func TestResignationNotifiesWatchers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := opener(t)
	leader, follower := open().(*postgres.Store), open().(*postgres.Store)
	for _, s := range []storage.Store{leader} {
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	other := opener(t)()
	if err := other.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	notified := make(chan struct{}, 16)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go follower.WatchResignations(wctx, func() { notified <- struct{}{} }, func(err error) { t.Logf("watch: %v", err) })
	select { // the watcher announces itself once it listens
	case <-notified:
	case <-ctx.Done():
		t.Fatal("the watcher never started listening")
	}

	// Another schema's resignation: no notification for this one.
	ol, _, err := other.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "x", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := other.LeaseResign(ctx, storage.LeaseResignParams{Owner: "x", Term: ol.Term}); err != nil || !ok {
		t.Fatalf("resign in the other schema: %v %v", ok, err)
	}

	l, _, err := leader.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if ok, err := leader.LeaseResign(ctx, storage.LeaseResignParams{Owner: "a", Term: l.Term}); err != nil || !ok {
		t.Fatalf("resign: %v %v", ok, err)
	}
	select {
	case <-notified:
		t.Logf("notified %v after the resignation", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("no notification within 5s of the resignation")
	}
	select {
	case <-notified:
		t.Fatal("notified twice: the other schema's resignation leaked in")
	case <-time.After(200 * time.Millisecond):
	}
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// Lane writes whose callers give up at any moment (queued, handed the lead,
// in a batch) get either their outcome or their context's error, never hang,
// and leave the batcher empty with every batch slot given back; and writes
// that overlap are combined.
func TestLaneBatcherSurvivesCallersGivingUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{URL: pgtest.NewSchema(t), PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const callers, calls = 16, 150
	var wg sync.WaitGroup
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lane := fmt.Sprint("lab/empty-", g)
			for i := 0; i < calls; i++ {
				cctx, ccancel := context.WithCancel(ctx)
				if i%3 == 0 { // give up at some point while the write is under way
					time.AfterFunc(time.Duration(rand.IntN(300))*time.Microsecond, ccancel)
				}
				_, err := s.QueueClaimNext(cctx, storage.QueueClaimNextParams{Lane: lane, Owner: "solo", LeaseTTL: time.Minute})
				ccancel()
				if !errors.Is(err, storage.ErrNoWork) && !errors.Is(err, context.Canceled) {
					t.Errorf("claim in an empty lane: want ErrNoWork or context.Canceled, got %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	lb := &s.lanes
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.inFlight != 0 || len(lb.queue) != 0 {
		t.Fatalf("after every caller returned: %d batches in flight, %d writes queued; want 0 and 0", lb.inFlight, len(lb.queue))
	}
	b, w := lb.batches.Load(), lb.writes.Load()
	t.Logf("%d writes in %d batches", w, b)
	if b >= w {
		t.Fatalf("%d writes took %d batches: none were combined", w, b)
	}
}

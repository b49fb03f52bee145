package api

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// A metrics scrape counted every unfinished row each time (0.3 to 2.9 s with
// 500,000 of them), whoever scraped: Prometheus, its pair, a standby's
// scrapes, a dashboard. Scrapes within queueStatsMaxAge of a read share it;
// those that come while it runs wait for it rather than read again; a
// failure is not kept; and drop (an operator's write through this node)
// makes the next scrape read afresh.
func TestScrapesShareTheQueueCountsForABoundedTime(t *testing.T) {
	var c statsCache
	var reads atomic.Int64
	gate := make(chan struct{})
	var fail atomic.Bool
	read := func() ([]storage.QueueStat, error) {
		n := reads.Add(1)
		<-gate
		if fail.Load() {
			return nil, errors.New("injected: the database is away")
		}
		return []storage.QueueStat{{Destination: "lab", Status: storage.QueuePending, Count: n}}, nil
	}
	ctx := context.Background()
	const maxAge = time.Hour

	// Scrapes that come while a read runs wait for it: one read.
	var wg sync.WaitGroup
	got := make([]int64, 5)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, _, err := c.get(ctx, maxAge, read)
			if err != nil || len(st) != 1 {
				t.Errorf("scrape %d: %v, %v; want the read's counts", i, st, err)
				return
			}
			got[i] = st[0].Count
		}()
	}
	waitFor(t, "a read under way", func() bool { return reads.Load() == 1 })
	close(gate)
	wg.Wait()
	for i, n := range got {
		if n != 1 {
			t.Fatalf("scrape %d got the counts of read %d; want every scrape the one read's", i, n)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads for 5 scrapes at once; want 1", n)
	}

	// Within the bound, the counts kept, with their age.
	st, age, err := c.get(ctx, maxAge, read)
	if err != nil || st[0].Count != 1 || age <= 0 || reads.Load() != 1 {
		t.Fatalf("a scrape after the read: counts of read %v, age %v, %v, %d reads; want the kept counts, aged, no read", st, age, err, reads.Load())
	}
	// Past the bound, a read.
	if st, _, err := c.get(ctx, 0, read); err != nil || st[0].Count != 2 || reads.Load() != 2 {
		t.Fatalf("a scrape past the bound: %v, %v, %d reads; want a new read", st, err, reads.Load())
	}
	// An operator's write through this node: the next scrape reads.
	c.drop()
	if st, _, err := c.get(ctx, maxAge, read); err != nil || st[0].Count != 3 {
		t.Fatalf("a scrape after drop: %v, %v; want a new read", st, err)
	}
	// A failed read is not kept: the next scrape reads again.
	c.drop()
	fail.Store(true)
	if _, _, err := c.get(ctx, maxAge, read); err == nil {
		t.Fatal("a failed read answered no error")
	}
	fail.Store(false)
	if st, _, err := c.get(ctx, maxAge, read); err != nil || st[0].Count != 5 {
		t.Fatalf("a scrape after a failed read: %v, %v; want a new read", st, err)
	}
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

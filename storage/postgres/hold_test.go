package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// A hold is one statement: it makes the hold (and moves the queue's
// version, which tells the lanes) or finds it made (its time kept, the
// version unmoved), and a release beside it never fails it. It was an
// insert that did nothing (the hold stood) and a read after it, each with
// its own snapshot, and a release committed between the two left the read
// with no row: "outbound hold: no rows in result set", the outbound not
// held. (500 rounds of the race did not meet that window here; the rounds
// check that nothing else does.)
func TestAHoldBesideAReleaseNeverFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := openMigrated(t, ctx, 4)
	version := func() int64 {
		v, err := s.ConfigVersionRead(ctx, storage.ConfigVersionReadParams{Name: storage.QueueVersionName})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v0 := version()
	first, err := s.OutboundHold(ctx, storage.OutboundHoldParams{Outbound: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	v1 := version()
	again, err := s.OutboundHold(ctx, storage.OutboundHoldParams{Outbound: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	if v1 != v0+1 || version() != v1 || !again.Since.Equal(first.Since) {
		t.Fatalf("hold: version %d -> %d, held since %v; again: version %d, since %v; want one move, by the hold that made it, and its time kept",
			v0, v1, first.Since, version(), again.Since)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	const rounds = 500
	for _, hold := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				var err error
				if hold {
					_, err = s.OutboundHold(ctx, storage.OutboundHoldParams{Outbound: "lab"})
				} else {
					_, err = s.OutboundRelease(ctx, storage.OutboundReleaseParams{Outbound: "lab"})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	h, err := s.OutboundHold(ctx, storage.OutboundHoldParams{Outbound: "lab"})
	if err != nil || h.Since.IsZero() {
		t.Fatalf("a hold after the race: %+v, %v", h, err)
	}
	holds, err := s.OutboundHolds(ctx)
	if err != nil || len(holds) != 1 || !holds[0].Since.Equal(h.Since) {
		t.Fatalf("holds %+v, %v; want lab held since %v", holds, err, h.Since)
	}
}

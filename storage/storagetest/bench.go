package storagetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// Bench measures the two hot paths of the engine: the group-commit ingest of
// a batch, and one lane's claim→complete cycle. Run it with
// `go test -run '^$' -bench . ./storage/...`; rows/s and cycles/s are reported
// as custom metrics.
func Bench(b *testing.B, newDB Opener) {
	for _, size := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("IngestBatch/%d", size), func(b *testing.B) {
			h := newHarness(b, newDB)
			batch := make([]storage.NewMessage, size)
			for i := range batch {
				batch[i] = msg("lab", fmt.Sprintf("P%d", i%10))
			}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if _, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: batch}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/time.Since(start).Seconds(), "rows/s")
		})
	}
	b.Run("ClaimComplete", func(b *testing.B) {
		h := newHarness(b, newDB)
		h.fill(zero, "lab", "P1", b.N)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			c, err := h.claim(zero, "lab/P1", time.Minute)
			if errors.Is(err, storage.ErrNoWork) || err != nil {
				b.Fatalf("claim %d: %v", i, err)
			}
			if err := h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: zero, Claim: c.Claim()}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
	})
}

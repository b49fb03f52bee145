package storagetest

import (
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// CheckOldestAges checks the OldestAge of each "destination/status" of
// stats against want, to within five seconds above it (the rows' ages are
// set by each dialect's test, in its own SQL, and read on the database's
// clock a moment later).
func CheckOldestAges(t *testing.T, stats []storage.QueueStat, want map[string]time.Duration) {
	t.Helper()
	got := map[string]time.Duration{}
	for _, st := range stats {
		got[st.Destination+"/"+st.Status] = st.OldestAge
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g < w || g > w+5*time.Second {
			t.Errorf("%s: oldest row's age %v (listed %v); want %v", k, g, ok, w)
		}
	}
}

package leadership

import (
	"testing"
	"time"
)

// A node on the primary's config version whose fingerprint differs is
// reported at once; on another version (a reload on its way) only once it
// has lasted driftGrace; fingerprints of another format (another mf) or none
// never; a match ends it.
func TestDiffersWaitsOutAReloadOnlyAcrossVersions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var since time.Time
	if !differs(&since, t0, "v1:aa", 3, "v1:bb", 3) || !since.Equal(t0) {
		t.Fatalf("same version, another fingerprint: want reported at once, since %v", since)
	}
	since = time.Time{}
	if differs(&since, t0, "v1:aa", 3, "v1:bb", 4) {
		t.Fatal("another version: reported at once; want it to wait out a reload")
	}
	if differs(&since, t0.Add(driftGrace-time.Second), "v1:aa", 3, "v1:bb", 4) {
		t.Fatal("another version: reported before driftGrace")
	}
	if !differs(&since, t0.Add(driftGrace), "v1:aa", 3, "v1:bb", 4) {
		t.Fatal("another version for driftGrace (a failed reload): not reported")
	}
	if differs(&since, t0.Add(2*driftGrace), "v1:bb", 4, "v1:bb", 4) || !since.IsZero() {
		t.Fatalf("same fingerprint: reported, or since kept (%v)", since)
	}
	for _, fp := range []string{"", "v2:aa"} {
		if differs(&since, t0, fp, 3, "v1:bb", 3) || differs(&since, t0, "v1:bb", 3, fp, 3) {
			t.Fatalf("fingerprint %q against v1: compared; want left alone", fp)
		}
	}
}

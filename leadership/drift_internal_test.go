package leadership

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/storage"
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

// A standby whose config differs from the primary's on another version (a
// reload on its way, or one that failed) reports ConfigDiffers from the
// first beat that sees it, while ConfigDrift (the gauge) waits driftGrace:
// the API refuses resends on ConfigDiffers, which in the grace minute a
// standby whose reload of a changed lane_key had failed took, queueing them
// in lanes of the old key.
func TestAStandbyDiffersAtOnceAndDriftsAfterTheGrace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := &Elector{nodeID: "b", fingerprint: "v1:aa", configLoaded: 3, log: zerolog.Nop()}
	nodes := func(now time.Time, pfp string) storage.NodeList {
		return storage.NodeList{DBNow: now, Nodes: []storage.Node{
			{NodeID: "a", Status: storage.NodeActive, LastSeen: now, IsLeader: true, ConfigVersion: 4, ConfigFingerprint: pfp},
			{NodeID: "b", Status: storage.NodeActive, LastSeen: now, ConfigVersion: 3, ConfigFingerprint: "v1:aa"},
		}}
	}
	t.Cleanup(func() { configDrift.Store(false); configDiffers.Store(false) })
	e.checkDrift(nodes(t0, "v1:bb"), t0)
	if !ConfigDiffers() || ConfigDrift() {
		t.Fatalf("first beat after the primary's reload: differs %v, drift %v; want true, false", ConfigDiffers(), ConfigDrift())
	}
	e.checkDrift(nodes(t0.Add(driftGrace), "v1:bb"), t0.Add(driftGrace))
	if !ConfigDiffers() || !ConfigDrift() {
		t.Fatalf("after driftGrace: differs %v, drift %v; want both", ConfigDiffers(), ConfigDrift())
	}
	e.checkDrift(nodes(t0.Add(2*driftGrace), "v1:aa"), t0.Add(2*driftGrace))
	if ConfigDiffers() || ConfigDrift() {
		t.Fatalf("same config again: differs %v, drift %v; want neither", ConfigDiffers(), ConfigDrift())
	}
}

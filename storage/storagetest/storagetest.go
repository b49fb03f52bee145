// Package storagetest is the conformance suite every storage dialect must
// pass. Each dialect's tests call Run (and Bench) with an Opener that makes a
// fresh, isolated database; the suite then proves the contracts of DESIGN §4
// against the real database: lane FIFO, the stranded head, racing claimers,
// the leader lease, the fence, promotion recovery, atomic ingest, retry and
// dead, purge and sweep, membership, the config version and the cluster's
// secrets.
package storagetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// Opener creates a fresh, isolated, unmigrated database for one test and
// returns a function that opens a new Store handle onto it each time it is
// called, each handle with its own connections. The Opener registers the
// cleanup of the database and of every handle it opens.
type Opener func(t testing.TB) (open func() storage.Store)

// Run runs the whole suite. Every test gets its own database and runs in
// parallel with the others.
func Run(t *testing.T, newDB Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"Migrate/ConcurrentAndIdempotent", testMigrateConcurrent},
		{"Migrate/RefusesANewerSchema", testMigrateRefusesNewer},
		{"Migrate/SchemaCheckSaysOlder", testSchemaCheckSaysOlder},
		{"Lane/ClaimsInIDOrder", testLaneFIFO},
		{"Lane/OtherLanesInterleave", testLanesInterleave},
		{"Lane/KeysDifferingInTrailingSpacesAreTwoLanes", testTrailingSpaceLanes},
		{"Queue/NamesDifferingInCaseOrTrailingSpacesAreApart", testKeysCompareExactly},
		{"Lane/LiveHeadBlocksStrandedHeadReclaimed", testStrandedHead},
		{"Lane/RacingClaimersNeverBothHold", testClaimRace},
		{"Lane/AdvanceCompletesAndClaimsNext", testAdvance},
		{"Lane/ClaimFromAFloor", testClaimFloor},
		{"Lane/ManyLanesAdvanceAtOnce", testAdvanceManyLanes},
		{"Lane/AdvanceClaimsARunAheadAndGivesBack", testAdvanceAhead},
		{"Lane/FailuresNameNoLane", testFailuresNameNoLane},
		{"Lane/ReleaseOwnGivesBackOnlyTheLanesRowsOfTheOwner", testReleaseOwn},
		{"Lane/ConcurrentIngestNeverHidesAnEarlierID", testConcurrentIngestNeverHidesAnEarlierID},
		{"Lease/Election", testLeaseElection},
		{"Lease/RacingElectionsElectOne", testRacingElectionsElectOne},
		{"Lease/NoElectionWhileASingleNodeHoldsTheSchema", testNoElectionBesideASingleNode},
		{"Fence/OldTermWritesFailAndChangeNothing", testFencedOperations},
		{"Recovery/OnlyForeignOwners", testRecoverForeign},
		{"Recovery/RowsClaimedAheadGetTheirAttemptBack", testRecoverForeignGivesBackTheAttemptsOfRowsClaimedAhead},
		{"Recovery/SingleNodeRestart", testRecoverAfterRestart},
		{"Ingest/BatchIsAtomic", testIngestAtomic},
		{"Ingest/AnyFieldsAreStorable", testIngestStorable},
		{"Ingest/ANilPayloadIsStoredEmpty", testIngestNilPayload},
		{"Ingest/LargeBinaryPayloadRoundTrips", testLargeBinaryPayloadRoundTrips},
		{"Message/ResendQueuesAtTheLaneTail", testResend},
		{"Queue/ResendDeadQueuesEachDeadRowOnceAtItsLaneTail", testResendDead},
		{"Message/SearchFiltersAndPages", testSearch},
		{"Queue/RetryKeepsHeadAndHonoursDueTime", testRetry},
		{"Queue/DeadMovesLaneOn", testDead},
		{"Queue/HoldBlocksUntilReleaseOrSkip", testHoldReleaseSkip},
		{"Queue/SkipActsOnlyOnTheLaneHead", testSkipOnlyTheHead},
		{"Queue/ReleaseGivesAFreshSetOfAttempts", testReleaseFreshAttempts},
		{"Queue/VersionMovesWithWhatNoLaneIsToldOf", testQueueVersion},
		{"Queue/ClaimChecks", testClaimChecks},
		{"Queue/EveryClaimWriteChecksOwnerAndAttempt", testEveryClaimWriteChecksOwnerAndAttempt},
		{"Queue/LanesAndStats", testLanesAndStats},
		{"Queue/LanePagesListEveryLaneOnce", testLanePages},
		{"Queue/LaneKeyRecordedPerDestination", testLaneKeyRecord},
		{"Queue/RelaneMovesUnfinishedRowsInIDOrder", testRelane},
		{"Outbound/HoldIsSharedIdempotentAndMovesTheQueueVersion", testOutboundHold},
		{"Outbound/HeldOutboundsRowsAreNotClaimed", testHeldOutboundNotClaimed},
		{"Purge/OnlyFinishedOlderThanCutoff", testPurge},
		{"Purge/NodesNotSeenSinceTheCutoff", testPurgeNodes},
		{"Purge/PastABlockedBacklog", testPurgeBlockedBacklog},
		{"Sweep/OnlyExpiredLeases", testReclaimExpired},
		{"Nodes/HeartbeatLeaveList", testNodes},
		{"Nodes/ConfigFingerprint", testNodeConfigFingerprint},
		{"Nodes/ConfigError", testNodeConfigError},
		{"Config/VersionBumpAndRead", testConfigVersion},
		{"Secret/FirstValueWins", testSecretFirstValueWins},
		{"Secret/RacingNodesAgree", testSecretRace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t, newDB))
		})
	}
}

// harness is one test's database, a migrated handle onto it and helpers that
// make the tests read like the scenario they prove.
type harness struct {
	t    testing.TB
	ctx  context.Context
	open func() storage.Store
	s    storage.Store
	// newDB makes another fresh database (the harness's is migrated).
	newDB Opener
	// msgOf maps the queue ids ingested through the harness to their message.
	msgOf map[int64]int64
}

func newHarness(t testing.TB, newDB Opener) *harness {
	open := newDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	h := &harness{t: t, ctx: ctx, open: open, newDB: newDB, msgOf: map[int64]int64{}}
	h.s = open()
	if err := h.s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return h
}

// zero is the single-node fence: it matches a never-elected lease.
var zero = storage.Fence{}

// msg is one routed message with a delivery to lane "dest/key".
func msg(dest, key string) storage.NewMessage {
	return storage.NewMessage{
		Inbound:     "in",
		ControlID:   fmt.Sprintf("ctl-%s-%s", dest, key),
		MessageType: "ADT^A01",
		Payload:     []byte("MSH|^~\\&|A|B|C|D|20260101000000||ADT^A01|1|P|2.5\rPID|1||" + key + "\r"),
		Status:      storage.MessageRouted,
		Deliveries:  []storage.Delivery{{Destination: dest, Lane: dest + "/" + key}},
	}
}

// ingest stores msgs in one batch and returns the first queue id of each.
func (h *harness) ingest(f storage.Fence, msgs ...storage.NewMessage) []int64 {
	h.t.Helper()
	res, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: f, Messages: msgs})
	if err != nil {
		h.t.Fatalf("ingest %d messages: %v", len(msgs), err)
	}
	if len(res) != len(msgs) {
		h.t.Fatalf("ingest returned %d results for %d messages", len(res), len(msgs))
	}
	var ids []int64
	for i, r := range res {
		if len(r.QueueIDs) != len(msgs[i].Deliveries) {
			h.t.Fatalf("message %d: %d queue ids for %d deliveries", i, len(r.QueueIDs), len(msgs[i].Deliveries))
		}
		for _, q := range r.QueueIDs {
			h.msgOf[q] = r.MessageID
		}
		if len(r.QueueIDs) > 0 {
			ids = append(ids, r.QueueIDs[0])
		}
	}
	return ids
}

// fill ingests n messages into one lane in batches and returns their queue ids.
func (h *harness) fill(f storage.Fence, dest, key string, n int) []int64 {
	h.t.Helper()
	var ids []int64
	for len(ids) < n {
		batch := make([]storage.NewMessage, 0, 100)
		for i := 0; i < 100 && len(ids)+len(batch) < n; i++ {
			batch = append(batch, msg(dest, key))
		}
		ids = append(ids, h.ingest(f, batch...)...)
	}
	return ids
}

func (h *harness) claim(f storage.Fence, lane string, ttl time.Duration) (storage.QueueClaim, error) {
	return h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: f, Lane: lane, Owner: ownerOf(f), LeaseTTL: ttl})
}

// solo is the row lease owner of the single-node process in these tests.
const solo = "solo:1:aa"

// ownerOf is the node that works under fence f: its owner, or, for the
// zero (single-node) fence, the single process.
func ownerOf(f storage.Fence) string {
	if f.Owner == "" {
		return solo
	}
	return f.Owner
}

// mustClaim claims the lane's head and fails the test unless it is wantID.
func (h *harness) mustClaim(f storage.Fence, lane string, ttl time.Duration, wantID int64) storage.QueueClaim {
	h.t.Helper()
	c, err := h.claim(f, lane, ttl)
	if err != nil {
		h.t.Fatalf("claim %s: want row %d, got %v", lane, wantID, err)
	}
	if c.Row.ID != wantID {
		h.t.Fatalf("claim %s: got row %d, want %d", lane, c.Row.ID, wantID)
	}
	return c
}

func (h *harness) mustNoWork(f storage.Fence, lane string) {
	h.t.Helper()
	c, err := h.claim(f, lane, time.Minute)
	if !errors.Is(err, storage.ErrNoWork) {
		h.t.Fatalf("claim %s: want ErrNoWork, got row %d, err %v", lane, c.Row.ID, err)
	}
}

// errOf is the error of an operator action (QueueRelease, QueueSkip), for
// a check of its refusal.
func errOf(_ storage.QueueActed, err error) error { return err }

// mustNotBePending fails the test unless err is an operator action's
// refusal of row id as not pending, saying its status is status.
func (h *harness) mustNotBePending(what string, err error, id int64, status string) {
	h.t.Helper()
	var np storage.NotPending
	if !errors.Is(err, storage.ErrNotPending) || !errors.As(err, &np) || np != (storage.NotPending{ID: id, Status: status}) {
		h.t.Fatalf("%s: %v; want a storage.NotPending of row %d with status %q", what, err, id, status)
	}
}

// mustNotBeHead fails the test unless err is a skip's refusal of row id as
// not its lane's head, naming head as the row ahead of it, and the row is
// still pending, as it was.
func (h *harness) mustNotBeHead(what string, err error, id, head int64) {
	h.t.Helper()
	var nh storage.NotHead
	if !errors.Is(err, storage.ErrNotHead) || !errors.As(err, &nh) || nh != (storage.NotHead{ID: id, Head: head}) {
		h.t.Fatalf("%s: %v; want a storage.NotHead of row %d naming row %d as its lane's head", what, err, id, head)
	}
	if errors.Is(err, storage.ErrNotPending) || errors.Is(err, storage.ErrNotFound) {
		h.t.Fatalf("%s: %v matches ErrNotPending or ErrNotFound; the row is there and pending", what, err)
	}
	if r := h.queueRow(id); r.Status != storage.QueuePending || r.LastError != "" {
		h.t.Fatalf("%s: the refused skip changed the row: %+v", what, r)
	}
}

// laneDepths reads QueueLanes: each lane's depth, and how many lanes it
// listed.
func (h *harness) laneDepths() (depth map[string]int64, listed int) {
	h.t.Helper()
	lanes, err := h.s.QueueLanes(h.ctx, storage.QueueLanesParams{})
	if err != nil {
		h.t.Fatal(err)
	}
	depth = map[string]int64{}
	for _, l := range lanes {
		depth[l.Lane] = l.Depth
	}
	return depth, len(lanes)
}

// complete records c's row delivered, naming its lane as a lane does
// (lanes/lane.go); the cases that complete without the lane (it is
// optional) call QueueComplete themselves.
func (h *harness) complete(f storage.Fence, c storage.QueueClaim) {
	h.t.Helper()
	err := h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: f, Claim: c.Claim(), Lane: c.Row.Lane})
	if err != nil {
		h.t.Fatalf("complete row %d: %v", c.Row.ID, err)
	}
}

// elect makes owner the leader with ttl and returns its fence.
func (h *harness) elect(owner string, ttl time.Duration) storage.Fence {
	h.t.Helper()
	l, ok, err := h.s.LeaseAttemptElect(h.ctx, storage.LeaseAttemptElectParams{Owner: owner, TTL: ttl})
	if err != nil || !ok {
		h.t.Fatalf("elect %s: elected=%v err=%v (lease %+v)", owner, ok, err, l)
	}
	return storage.Fence{Owner: owner, Term: l.Term}
}

// queueRow reads one queue row through its message.
func (h *harness) queueRow(id int64) storage.QueueRow {
	h.t.Helper()
	msgID, ok := h.msgOf[id]
	if !ok {
		h.t.Fatalf("queue row %d was not ingested through the harness", id)
	}
	d, err := h.s.MessageRead(h.ctx, msgID)
	if err != nil {
		h.t.Fatalf("read message %d: %v", msgID, err)
	}
	for _, r := range d.Queue {
		if r.ID == id {
			return r
		}
	}
	h.t.Fatalf("queue row %d not found under message %d", id, msgID)
	return storage.QueueRow{}
}

// waitFor polls cond until it holds or the deadline passes.
func (h *harness) waitFor(what string, timeout time.Duration, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// queueVersion reads the queue's version (storage.QueueVersionName).
func (h *harness) queueVersion() int64 {
	h.t.Helper()
	v, err := h.s.ConfigVersionRead(h.ctx, storage.ConfigVersionReadParams{Name: storage.QueueVersionName})
	if err != nil {
		h.t.Fatalf("read the queue version: %v", err)
	}
	return v
}

// dbNow reads the database clock.
func (h *harness) dbNow() time.Time {
	h.t.Helper()
	l, err := h.s.LeaseRead(h.ctx)
	if err != nil {
		h.t.Fatalf("lease read: %v", err)
	}
	return l.DBNow
}

// waitDBClockPast waits until the database clock is after t.
func (h *harness) waitDBClockPast(t time.Time) {
	h.t.Helper()
	h.waitFor("database clock to pass "+t.String(), 30*time.Second, func() bool { return h.dbNow().After(t) })
}

// Package storage defines the durable store every part of mf stands on: the
// message log, the per-lane FIFO queue, the leader lease, node membership,
// the shared config version and the cluster's secrets.
//
// This package holds only the contract: the Store interface, its Params
// structs, the entities it returns and the errors every dialect maps its
// native errors to. Each dialect lives in a leaf package (storage/sqlite,
// storage/postgres, storage/sqlserver) with its SQL in embedded .sql files, and
// storage/storagetest is the one conformance suite they all pass.
//
// Two rules hold in every dialect:
//
//   - Time is the database's clock. Leases, due times and ages are computed in
//     SQL from the database's own now(), so node clock skew never decides who
//     may hold a lease or when a row may be reclaimed.
//   - Every write the message graph makes carries a Fence and is checked
//     against the leader lease in the same transaction. A write whose fence no
//     longer matches fails with ErrFenced and changes nothing.
package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/messagefoundry/mf/internal/textcut"
)

// Store is the durable store. Methods are named entity-first (Lease…, Node…,
// Message…, Queue…, Config…, Secret) so that they sort together.
//
// Methods that take a Fence are the graph's writes: they run only while the
// fence matches the leader lease row and fail with ErrFenced otherwise.
type Store interface {
	// Dialect names the backend: "sqlite", "postgres" or "sqlserver".
	Dialect() string
	// Clusterable reports whether several nodes may share this store. SQLite
	// is single-node only.
	Clusterable() bool
	// ClaimAhead is how many rows behind its next head a delivering lane
	// claims in the same write on this store (QueueAdvanceParams.Ahead): 0
	// where a run's statement costs more than the head claims it saves.
	ClaimAhead() int
	// Migrate applies the embedded schema migrations that are not applied
	// yet, under a database lock so that two nodes starting together cannot
	// both migrate. It is idempotent.
	Migrate(ctx context.Context) error
	// Ping checks that the store is reachable and migrated.
	Ping(ctx context.Context) error
	// SchemaCheck reads the migrations applied to the database, without a
	// lock, and returns ErrSchemaNewer (see CheckApplied) if one of them is
	// not this build's: a newer mf migrated it while this one runs (a
	// rolling upgrade). Migrate refuses such a schema at start; a running
	// node calls this now and then to learn of it.
	// It returns ErrSchemaOlder (see CheckSchema) if one of this build's
	// is not applied: mf migrate has not run yet.
	SchemaCheck(ctx context.Context) error
	// Close releases the store's connections.
	Close() error

	// LeaseAttemptElect takes the leader lease for p.Owner if, and only if,
	// it has expired or been resigned. It never preempts a live lease, not
	// even one held by p.Owner itself. On success the term grows by one. It
	// returns the lease as it stands after the attempt and whether p.Owner
	// was elected. On PostgreSQL and SQL Server it elects nobody while a
	// single node holds the schema's single-node lock (HoldSingleNode):
	// it takes that lock shared, without waiting, in the election's own
	// transaction, and returns ErrSingleNodeRunning when it is not granted.
	// A renewal or a resignation takes no such lock.
	LeaseAttemptElect(ctx context.Context, p LeaseAttemptElectParams) (Lease, bool, error)
	// LeaseAttemptRenew extends the lease to db_now + p.TTL only if it is
	// still held by exactly p.Owner at p.Term; otherwise it returns
	// ErrLeaseLost and changes nothing.
	LeaseAttemptRenew(ctx context.Context, p LeaseAttemptRenewParams) (Lease, error)
	// LeaseResign expires the lease now if it is held by p.Owner at p.Term,
	// so that another node may elect at once (PostgreSQL also notifies
	// listening followers). It reports whether it resigned anything.
	LeaseResign(ctx context.Context, p LeaseResignParams) (bool, error)
	// LeaseRead returns the lease row and the database clock.
	LeaseRead(ctx context.Context) (Lease, error)

	// NodeHeartbeat records that a node is alive (inserting it on first
	// beat, reviving a left tombstone with the same id; with p.Started, the
	// row's started_at is now).
	NodeHeartbeat(ctx context.Context, p NodeHeartbeatParams) error
	// NodeLeave marks a node left and clears its leader flag: the tombstone
	// of a clean stop.
	NodeLeave(ctx context.Context, p NodeLeaveParams) error
	// NodeList returns every node row, ordered by node id, and the database
	// clock at which it was read.
	NodeList(ctx context.Context) (NodeList, error)

	// MessageIngest stores a batch of messages and one pending queue row per
	// delivery, atomically: the whole batch commits or none of it. Queue ids
	// follow the order of p.Messages. Ingest transactions are serialised in
	// the database so that queue ids become visible in id order (a later id
	// is never visible before an earlier one), which the lane claim relies on.
	MessageIngest(ctx context.Context, p MessageIngestParams) ([]IngestedMessage, error)
	// MessageRead returns one message and its queue rows, or ErrNotFound.
	MessageRead(ctx context.Context, id int64) (MessageDetail, error)
	// MessageSearch lists the messages received in [p.Since, p.Until) that
	// match p's filters, newest first (received_at, then id, descending), at
	// most p.Limit, each with the id, destination and status of its queue
	// rows; never a payload. p.Since is required: the search walks the
	// received_at index over that window and no further, so it stays cheap on
	// a store of any size. With p.BeforeID, only the messages after message
	// p.BeforeID in that order (the next page).
	MessageSearch(ctx context.Context, p MessageSearchParams) ([]MessageSummary, error)
	// MessageResend queues message p.MessageID again, as an operator asks
	// from any node's API: one new pending queue row per p.Deliveries, in
	// their order, at the tail of its lane. Like MessageIngest it is
	// serialised with every ingest, so that queue ids become visible in id
	// order (the lane claim's FIFO argument, (b)), and unlike it it is not
	// fenced. It bumps the QueueVersionName version in the same transaction,
	// so that the leader's lanes look at the store again. ErrNotFound if
	// there is no such message (nothing is queued then). It returns the new
	// queue ids in the order of p.Deliveries. The message's dead rows of
	// each destination it queues are marked resent, as QueueResendDead
	// marks them, so that a QueueResendDead does not queue it again.
	MessageResend(ctx context.Context, p MessageResendParams) ([]int64, error)
	// QueueResendDead queues again, for an operator, the messages of
	// destination p.Destination's dead rows that were not resent this way
	// yet: for each such row, in id order, a new pending row of its message
	// at the tail of the lane p.Lane gives it (the routes in force), and the
	// dead row is marked resent (it stays dead, and is purged as one), so
	// that another call does not resend it again; a row p.Lane skips is
	// left as it is, and counted. Only the rows set aside (updated_at) in
	// [p.Since, p.Until) (a zero time: no bound), at most p.Limit (0: all),
	// and only rows older than the first new row (a row resent and dead
	// again within the call waits for the next call). It works in
	// transactions of at most ResendDeadChunk rows, each like
	// MessageResend's: serialised with every ingest, not fenced, bumping
	// the QueueVersionName version. The result counts the rows resent by
	// the transactions that committed, also when it returns an error.
	QueueResendDead(ctx context.Context, p QueueResendDeadParams) (ResentDead, error)
	// MessagePurge deletes finished queue rows ('done' or 'dead') last
	// updated before db_now - p.OlderThan, then messages older than the
	// cut-off that have no queue rows left, and the rows of nodes not seen
	// since the cut-off (a live node's heartbeat writes its row again).
	// Rows that are pending or in flight are never touched.
	MessagePurge(ctx context.Context, p MessagePurgeParams) (PurgeResult, error)

	// QueueClaimNext claims the head of one lane, or returns ErrNoWork. See
	// the FIFO argument beside each dialect's queue_claim_next.sql. Nothing
	// is claimed while an operator holds the lane's destination
	// (OutboundHold): the claim reads the holds itself.
	QueueClaimNext(ctx context.Context, p QueueClaimNextParams) (QueueClaim, error)
	// QueueComplete marks a claimed row done. Like every write that acts on
	// a claim (QueueRetry, QueueDead, QueueHold, QueueExtendLease), it acts
	// only while p.Claim is its row's current claim (the row in flight, at
	// that attempt, under that owner) and otherwise changes nothing and
	// returns ErrClaimLost, or ErrNotFound if there is no such row.
	QueueComplete(ctx context.Context, p QueueCompleteParams) error
	// QueueAdvance is QueueComplete of p.Claim followed by QueueClaimNext
	// of p.Lane from p.Claim.ID (the completed row is a floor, see
	// QueueClaimNextParams.From), in one transaction: the hot path of a
	// delivering lane, one write per delivered row instead of two. A claim
	// that is no longer current is not an error here (Completed is false, as
	// QueueComplete's ErrClaimLost), nor is a lane with nothing claimable
	// (Next is nil, as QueueClaimNext's ErrNoWork). A stale fence is
	// ErrFenced and changes nothing. With p.Ahead, it also claims up to
	// that many rows right behind the new head (QueueAdvanced.Ahead).
	QueueAdvance(ctx context.Context, p QueueAdvanceParams) (QueueAdvanced, error)
	// QueueGiveBack returns claimed rows that were never sent to pending,
	// in place, as if never claimed (the claim's attempt is taken back),
	// and returns how many it returned. A claim no longer current is
	// skipped, not an error.
	QueueGiveBack(ctx context.Context, p QueueGiveBackParams) (int64, error)
	// QueueReleaseOwn returns to pending every row of p.Lane in flight
	// under p.Owner's lease, live or not, exactly as QueueGiveBack returns
	// a row (in place, its attempt taken back), and returns how many. A
	// lane calls it, holding no row, when a write of its that claims rows
	// may have committed without its caller hearing so (the reply lost):
	// those rows are in flight under its lease and it knows nothing of
	// them (lanes/lane.go, releaseOwn, says why none of them was sent).
	// It does not move the queue's version: the lane that calls it claims
	// next.
	QueueReleaseOwn(ctx context.Context, p QueueReleaseOwnParams) (int64, error)
	// QueueRetry puts a claimed row back to pending, due after p.Delay. It
	// stays its lane's head, so the lane waits for it.
	QueueRetry(ctx context.Context, p QueueRetryParams) error
	// QueueDead sets a claimed row aside; its lane moves on.
	QueueDead(ctx context.Context, p QueueDeadParams) error
	// QueueHold parks a claimed row as its lane's blocked head (on_exhausted
	// = "block"): pending again but held, so no claim takes it and the lane
	// waits until an operator releases or skips it.
	QueueHold(ctx context.Context, p QueueHoldParams) error
	// QueueRelease is an operator's retry: a pending row (held, or backing
	// off) is unheld and due now, with a fresh set of attempts (its claims'
	// AttemptsSinceRetry count from here; Attempts keeps its total). It is
	// not fenced: operators act through the API of any node. A NotPending
	// (ErrNotPending), with the row's status, if it is in flight or
	// finished. It bumps the QueueVersionName version in the same transaction.
	//
	// Unlike QueueSkip it takes any pending row, its lane's head or not: a
	// row behind the head that is made due now is still claimed only once
	// every row ahead of it is done or dead (the claim starts at the head),
	// so a retry of the wrong row changes no order and loses nothing; it
	// only gives that row its fresh set of attempts early.
	QueueRelease(ctx context.Context, p QueueReleaseParams) (QueueActed, error)
	// QueueSkip is an operator's skip: a pending row that is its lane's
	// head is set aside as dead with p.Reason, and its lane moves on. Only
	// the head: a pending row with a lower id of its lane still unfinished
	// (pending or in flight) ahead of it is refused with a NotHead
	// (ErrNotHead) naming that head, and stays pending, so that a mistyped
	// id cannot drop a message queued behind a healthy head. The check is
	// in the skip's own statement (SQL Server's own batch), with no race:
	// ids only grow and a finished row never comes back, so a row that is
	// its lane's head stays the head until it is finished. Not fenced, and
	// refused with a NotPending, like QueueRelease, when the row is in
	// flight or finished; it bumps the QueueVersionName version in the same
	// transaction.
	QueueSkip(ctx context.Context, p QueueSkipParams) (QueueActed, error)
	// QueueExtendLease pushes a claimed row's lease to db_now + p.TTL.
	QueueExtendLease(ctx context.Context, p QueueExtendLeaseParams) error
	// QueueRecoverForeign is promotion recovery: it re-pends every in-flight
	// row leased by an owner other than p.Owner, whatever its lease expiry,
	// and returns how many. A row above its lane's lowest unfinished row was
	// claimed ahead and never sent (FIFO), so it gets its attempt back, as
	// from QueueGiveBack; the lowest keeps it. When it re-pends any, it
	// bumps the QueueVersionName version in the same transaction.
	QueueRecoverForeign(ctx context.Context, p QueueRecoverForeignParams) (int64, error)
	// QueueReclaimExpired is the recurring sweep: it re-pends in-flight rows
	// whose lease has expired, and returns how many. When it re-pends any,
	// it bumps the QueueVersionName version in the same transaction.
	QueueReclaimExpired(ctx context.Context, p QueueReclaimExpiredParams) (int64, error)
	// QueueLanes lists the lanes that have pending or in-flight rows, in
	// the store's order of lane names: those after p.After, at most
	// p.Limit of them (0: every one). A page is one statement that reads
	// only its own lanes' rows (a walk of mf_queue_lane_head), so the
	// first page of a large backlog comes at once; the next page starts
	// after the last lane's name. A walk of pages, like a listing with no
	// Limit (a walk of LanesPage pages), lists each lane that has work
	// from its start to its end once; a lane that gains or loses its work
	// meanwhile may or may not be listed.
	QueueLanes(ctx context.Context, p QueueLanesParams) ([]LaneSummary, error)
	// QueueStats counts the unfinished and dead queue rows by destination
	// and status, and the held ones among them.
	QueueStats(ctx context.Context) ([]QueueStat, error)
	// QueueLaneKeys returns, per destination, the laning its unfinished
	// rows were split into lanes by, as last recorded (QueueLaneKeyRecord):
	// a destination never recorded is not in the map. A lane is computed
	// once, at ingest, from the routes in force then; a graph that starts
	// with routes that lane a destination otherwise moves its rows first
	// (QueueRelane), or newer messages of a key would be in another lane
	// than its older ones, with no order between them.
	QueueLaneKeys(ctx context.Context) (map[string]string, error)
	// QueueLaneKeyRecord records that p.Destination's unfinished rows are
	// laned by p.LaneKey (at most MaxLaneKeyBytes), replacing what was
	// recorded. Fenced.
	QueueLaneKeyRecord(ctx context.Context, p QueueLaneKeyRecordParams) error
	// QueueRelaneRead returns up to p.Limit unfinished rows (pending or in
	// flight, held ones too) of p.Destination that come after p.After in
	// (lane, id) order, in that order, each with its message's inbound and
	// payload: a page of the rows to lane again. The next page starts after
	// the last row's (Lane, ID). Finished rows (done, dead) are not read:
	// they are in no lane's order any more.
	QueueRelaneRead(ctx context.Context, p QueueRelaneReadParams) ([]RelaneRow, error)
	// QueueRelane moves each row of p.Moves to its Lane if it is still
	// unfinished, in one transaction, and returns how many it moved. Its
	// status, attempts, due time, hold and lease stay. Fenced. Only a
	// leader with no lane running may call it (a lane's order is what
	// its claims see).
	QueueRelane(ctx context.Context, p QueueRelaneParams) (int64, error)

	// OutboundHold holds outbound p.Outbound for an operator: while it is
	// held, no claim takes a row of it (QueueClaimNext, QueueAdvance: a
	// claim begun after the hold committed sees it, on any node), the
	// leader's lanes for it send nothing more (lanes.Manager learns of it
	// at its next rescan, or at once through the primary's own API:
	// lanes.HoldChanged; a send in flight finishes), and its
	// messages are still stored and queued. It is idempotent: holding a
	// held outbound keeps its hold as it was. It returns the hold. Not
	// fenced (operators act through the API of any node, standbys too); a
	// hold it makes bumps the QueueVersionName version in the same
	// transaction, so that the leader's lanes look at the store again.
	OutboundHold(ctx context.Context, p OutboundHoldParams) (OutboundHeld, error)
	// OutboundRelease releases p.Outbound's hold, if it has one, and
	// reports whether it had. Like OutboundHold: idempotent, not fenced, and
	// a release it makes bumps the QueueVersionName version in the same
	// transaction; the outbound's lanes then resume from their heads, in
	// order.
	OutboundRelease(ctx context.Context, p OutboundReleaseParams) (bool, error)
	// OutboundHolds lists the held outbounds, by name.
	OutboundHolds(ctx context.Context) ([]OutboundHeld, error)

	// ConfigVersionBump increments the named config version and returns it.
	ConfigVersionBump(ctx context.Context, p ConfigVersionBumpParams) (int64, error)
	// ConfigVersionRead returns the named config version (0 if never bumped).
	ConfigVersionRead(ctx context.Context, p ConfigVersionReadParams) (int64, error)

	// Secret returns the cluster's secret named name, first storing fresh
	// as its value if the name has none. The first value stored stays for
	// good, so every node of a cluster, before and after any failover or
	// restart, gets the same bytes; nodes calling it at once all get the one
	// value that was stored. The API keys the lane hashes it shows a viewer
	// with one (api.Lane): without a key, a short lane key (a patient's
	// MRN) is found by hashing every possible value, and a key that lived
	// only in one process would change the hashes a dashboard shows at
	// every failover and restart. It is not fenced: a standby's API needs
	// it too, and storing the first value is no write of the graph. fresh
	// must pass CheckSecret; the caller makes it random.
	Secret(ctx context.Context, name string, fresh []byte) ([]byte, error)
}

// ResignWatcher is implemented by stores that can tell followers at once
// that the leader resigned (PostgreSQL, with LISTEN/NOTIFY), so that a clean
// stop hands over in well under a heartbeat. Other stores' followers notice
// at their next election attempt.
type ResignWatcher interface {
	// WatchResignations calls notify for every resignation of the leader
	// lease of this store until ctx is done; it reconnects after errors,
	// reporting each to onError. It returns when ctx is done.
	WatchResignations(ctx context.Context, notify func(), onError func(error))
}

// Errors every dialect maps its native errors to. Compare with errors.Is.
var (
	// ErrFenced means the write's fence no longer matches the leader lease:
	// another node has won a newer term (or this node never held it). The
	// write changed nothing; the caller must stop acting as leader.
	ErrFenced = errors.New("storage: fenced: the leader lease has moved to another owner or term")
	// ErrLeaseLost means a renew found the leader lease held by another
	// owner or term. The caller has lost leadership.
	ErrLeaseLost = errors.New("storage: leader lease lost: held by another owner or term")
	// ErrNotFound means the addressed row does not exist.
	ErrNotFound = errors.New("storage: not found")
	// ErrNoWork means a lane has nothing claimable now: it is empty, its
	// head is in flight under a live lease, or its head is not yet due.
	ErrNoWork = errors.New("storage: no claimable row in lane")
	// ErrNotPending means an operator action addressed a queue row that is
	// in flight or finished, not pending. The dialects return it as a
	// NotPending, which says which.
	ErrNotPending = errors.New("storage: queue row is not pending (it is in flight or finished)")
	// ErrNotHead means an operator's skip addressed a pending queue row that
	// is not its lane's head: a row with a lower id of its lane is pending
	// or in flight. The dialects return it as a NotHead, which names the
	// head.
	ErrNotHead = errors.New("storage: queue row is not the head of its lane")
	// ErrClaimLost means the queue row is no longer in flight under the
	// caller's claim (its lease expired and it was reclaimed, or it was
	// finished). The caller's delivery may be repeated by the next claim.
	ErrClaimLost = errors.New("storage: queue row is no longer held by this claim")
	// ErrRefused means the database refused a value the write carried (a
	// field too long for an index, a byte it cannot store, a constraint):
	// the same write would fail the same way again. MessageIngest returns
	// it so that the ingest can store the rest of a batch without the
	// message refused, instead of failing every sender in the batch.
	ErrRefused = errors.New("storage: the database refused a value of the write")
	// ErrFull means a write failed for want of space: the database's disk
	// is full. Nothing of the write was stored, and the same write works
	// once space is freed, so it is retried (an ingest answers AE, a lane
	// tries again), never refused. Its message says where to free space.
	ErrFull = errors.New("storage: the database is out of disk space")
	// ErrDamaged means the store has found its own file damaged (SQLite's
	// "database disk image is malformed"): from then on it stores nothing
	// more (an ingest answers AE, and the sender keeps its message) and
	// Ping fails, until it is restored from a backup. Its message says how.
	ErrDamaged = errors.New("storage: the database file is damaged")
	// ErrReadOnly means the database takes no writes: a standby, or one
	// set read-only (a managed service does when its disk is nearly full).
	// Ping returns it, so that /ready tells a node that can do nothing
	// there; its message says what to do.
	ErrReadOnly = errors.New("storage: the database is read-only")
	// ErrSingleNodeTaken means another process runs as the single node
	// (cluster disabled) of the store's schema: it holds the lock that the
	// dialects' HoldSingleNode takes (PostgreSQL, SQL Server). Two single
	// nodes both led, each with the zero fence every process passes. A
	// single node whose lock another took while its session was down has
	// its zero-fence writes refused with it.
	ErrSingleNodeTaken = errors.New("storage: another mf runs as the single node of this database schema")
	// ErrSingleNodeRunning is LeaseAttemptElect's refusal while a single
	// node (cluster disabled) runs on the store's schema, holding the lock
	// that HoldSingleNode takes: nothing is elected. The single node writes
	// with the zero fence, which holds while no node has been elected; a
	// node elected beside it recovered the rows it was sending and sent
	// them, and newer ones, while it still sent its own, until its next
	// write met the fence. The elector stays a follower and tries again
	// at its next attempt. Stop the single node, or enable [cluster] on it.
	ErrSingleNodeRunning = errors.New("storage: a single node (cluster disabled) runs on this database schema, and no node is elected beside it")
)

// NotPending is the ErrNotPending of an operator action (QueueRelease,
// QueueSkip) that matched nothing: the row's status as the action found it
// right after, so that the operator is told whether it is being delivered
// or finished. errors.Is(err, ErrNotPending) holds for it.
type NotPending struct {
	ID int64
	// Status is QueueInflight, QueueDone or QueueDead; QueuePending only
	// if the row was in flight and was re-pended (its lease reclaimed, a
	// lane's retry or hold) between the action's update and its look, or,
	// for a skip, if the rows ahead of it in its lane finished in between
	// (it was not the head as the skip ran, and is now): then the action
	// may just be made again. A finished row stays finished.
	Status string
}

func (e NotPending) Error() string {
	return fmt.Sprintf("storage: queue row %d is not pending: its status is %q", e.ID, e.Status)
}

// Is makes a NotPending match ErrNotPending.
func (e NotPending) Is(target error) bool { return target == ErrNotPending }

// NotHead is the ErrNotHead of an operator's skip (QueueSkip) of a pending
// row that is not its lane's head. The row is left pending.
// errors.Is(err, ErrNotHead) holds for it.
type NotHead struct {
	ID int64
	// Head is the lane's head as the skip's look found it right after: the
	// lowest id of the row's lane that is pending or in flight. It is below
	// ID.
	Head int64
}

func (e NotHead) Error() string {
	return fmt.Sprintf("storage: queue row %d is pending but is not the head of its lane: row %d is ahead of it", e.ID, e.Head)
}

// Is makes a NotHead match ErrNotHead.
func (e NotHead) Is(target error) bool { return target == ErrNotHead }

// SkipRefused is why an operator's skip of queue row id changed nothing,
// from what the dialect's look found (queue_skip_refused.sql): the row's
// status, and the lane's head ahead of it if any (ahead). A pending row with
// a head ahead is a NotHead; any other is a NotPending with its status (a
// pending one with none ahead any more may just be skipped again).
func SkipRefused(id int64, status string, head int64, ahead bool) error {
	if status == QueuePending && ahead {
		return NotHead{ID: id, Head: head}
	}
	return NotPending{ID: id, Status: status}
}

// Refused returns ErrRefused with what the database said, in its own terms
// (an error code, a constraint's name): never the driver's message, which
// may quote the value refused, a field of a patient's message.
func Refused(what string) error { return fmt.Errorf("%w (%s)", ErrRefused, what) }

// Fence identifies the leader term a write is made under. The zero Fence is
// the single-node fence: it matches only a lease row that no node has ever
// been elected into (owner "" and term 0), which is what a single-node store
// always has, so single-node writes need no special path and a single-node
// process pointed at a database a cluster has used is refused with ErrFenced.
type Fence struct {
	Owner string
	Term  int64
}

// Lease is the leader lease row, read together with the database clock.
type Lease struct {
	Owner      string
	Term       int64
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// DBNow is the database clock in the same statement, so that
	// ExpiresAt.Sub(DBNow) is how long the lease has left without trusting
	// the local clock.
	DBNow time.Time
}

// Remaining is how long the lease has left on the database clock (never
// negative).
func (l Lease) Remaining() time.Duration {
	if d := l.ExpiresAt.Sub(l.DBNow); d > 0 {
		return d
	}
	return 0
}

// LeaseAttemptElectParams are the arguments of Store.LeaseAttemptElect.
type LeaseAttemptElectParams struct {
	Owner string
	TTL   time.Duration
}

// LeaseAttemptRenewParams are the arguments of Store.LeaseAttemptRenew.
type LeaseAttemptRenewParams struct {
	Owner string
	Term  int64
	TTL   time.Duration
}

// LeaseResignParams are the arguments of Store.LeaseResign.
type LeaseResignParams struct {
	Owner string
	Term  int64
}

// Node statuses.
const (
	NodeActive = "active"
	NodeLeft   = "left"
)

// Node is one row of mf_nodes.
type Node struct {
	NodeID        string
	Host          string
	PID           int64
	Status        string
	StartedAt     time.Time
	LastSeen      time.Time
	IsLeader      bool
	ConfigVersion int64
	// ConfigFingerprint is the fingerprint of the graph config the node
	// runs (config.Config.GraphFingerprint), as of its last beat; "" for a
	// node whose mf predates it.
	ConfigFingerprint string
	// ConfigFailedVersion is the newest config version the node failed to
	// reload (its own file did not load, or could not run), and ConfigError
	// why; 0 and "" once a reload works, or for a node whose mf predates
	// them. A node keeps running ConfigVersion meanwhile.
	ConfigFailedVersion int64
	ConfigError         string
}

// NodeList is every node row and the database clock at which it was read.
type NodeList struct {
	Nodes []Node
	DBNow time.Time
}

// NodeHeartbeatParams are the arguments of Store.NodeHeartbeat.
type NodeHeartbeatParams struct {
	NodeID        string
	Host          string
	PID           int64
	IsLeader      bool
	ConfigVersion int64
	// ConfigFingerprint is the fingerprint of the graph config this node
	// runs (at most MaxConfigFingerprintBytes).
	ConfigFingerprint string
	// ConfigFailedVersion and ConfigError are as in Node: the reload this
	// node failed, if any, and why (at most MaxConfigErrorBytes).
	ConfigFailedVersion int64
	ConfigError         string
	// Started says that this is the first beat of the process: started_at
	// becomes now even if the row is active, as a run of the same node id
	// that crashed (kill -9, no tombstone) left it.
	Started bool
}

// MaxConfigFingerprintBytes bounds NodeHeartbeatParams.ConfigFingerprint,
// the width of the mf_nodes column in every dialect.
const MaxConfigFingerprintBytes = 100

// MaxConfigErrorBytes bounds NodeHeartbeatParams.ConfigError, the width of
// the mf_nodes column in every dialect (a longer error is cut by the
// elector, at a character boundary).
const MaxConfigErrorBytes = 1000

// NodeLeaveParams are the arguments of Store.NodeLeave.
type NodeLeaveParams struct {
	NodeID string
}

// Message statuses.
const (
	MessageRouted   = "routed"
	MessageUnrouted = "unrouted"
	MessageRejected = "rejected"
)

// Queue row statuses.
const (
	QueuePending  = "pending"
	QueueInflight = "inflight"
	QueueDone     = "done"
	QueueDead     = "dead"
)

// MessageIngestParams are the arguments of Store.MessageIngest.
type MessageIngestParams struct {
	Fence    Fence
	Messages []NewMessage
}

// NewMessage is one message of an ingest batch.
//
// Its text fields must be valid UTF-8 without NUL, and its lanes at most
// MaxLaneBytes long (Storable): PostgreSQL refuses anything else, and HL7 v2
// messages are often in another character set.
type NewMessage struct {
	Inbound     string
	ControlID   string
	MessageType string
	// Payload is the raw bytes as received, always.
	Payload []byte
	// Status is MessageRouted, MessageUnrouted or MessageRejected.
	Status string
	// Error says why a message was rejected; empty otherwise.
	Error string
	// Deliveries get one pending queue row each, in this order.
	Deliveries []Delivery
}

// ValidText returns s as every dialect's text columns keep it: valid UTF-8,
// with each byte that is not part of it, and each NUL, replaced by U+FFFD.
// Text taken from a message (its control id, a lane key) or from a
// destination's reply may be in any character set (Latin-1 is common in HL7
// v2) and may hold any byte. PostgreSQL refuses invalid UTF-8 and NUL in
// text: stored as it came, such a message failed the whole ingest batch
// (every sender in it got AE, and its own sender resent it forever), or a
// delivery's outcome could never be recorded.
func ValidText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return s
}

// MaxLaneBytes bounds a stored lane name, in bytes of UTF-8. Every dialect
// indexes lanes, and an index entry has a limit: PostgreSQL's b-tree refuses
// an entry over 2,704 bytes, SQL Server's lane column is NVARCHAR(800) (800
// UTF-16 code units, never more than the same text's UTF-8 bytes). A lane
// over the limit failed the whole ingest batch it came in, as above.
const MaxLaneBytes = 800

// laneHashLen is the length of the suffix BoundLane gives a long lane: '#'
// and 16 hex digits of its SHA-256.
const laneHashLen = 17

// BoundLane returns lane, or, when it is longer than MaxLaneBytes, its first
// bytes (cut at a character) followed by '#' and 16 hex digits of the whole
// lane's SHA-256. The same long key always maps to the same lane, and two
// keys that share the kept part still get lanes of their own (but for a
// 64-bit hash collision, which would only merge two lanes into one FIFO
// order): so each key's messages stay in order, and a key of any length is
// stored rather than refused.
func BoundLane(lane string) string {
	if len(lane) <= MaxLaneBytes {
		return lane
	}
	sum := sha256.Sum256([]byte(lane))
	return textcut.Cut(lane, MaxLaneBytes-laneHashLen) + "#" + hex.EncodeToString(sum[:8])
}

// Storable returns m as every dialect can store it: its text fields valid
// (ValidText) and its lanes bounded (BoundLane, after ValidText, which may
// lengthen them). The lane names the engine goes on to use are the stored
// ones. The payload is bytes and stays as received. Deliveries are copied
// only if a lane changes (the rule is that none does, and this is on the
// ingest path); destinations are config names, UTF-8 already (TOML).
func (m NewMessage) Storable() NewMessage {
	m.ControlID, m.MessageType, m.Error = ValidText(m.ControlID), ValidText(m.MessageType), ValidText(m.Error)
	copied := false
	for i, d := range m.Deliveries {
		if lane := BoundLane(ValidText(d.Lane)); lane != d.Lane {
			if !copied { // the caller's slice stays as it was
				m.Deliveries, copied = append([]Delivery(nil), m.Deliveries...), true
			}
			m.Deliveries[i].Lane = lane
		}
	}
	return m
}

// Delivery names the destination and lane of one queue row.
type Delivery struct {
	Destination string
	// Lane is the FIFO lane, "destination/key" (DESIGN §7).
	Lane string
}

// IngestedMessage is the id given to one message of a batch and to its queue
// rows, in the order of NewMessage.Deliveries.
type IngestedMessage struct {
	MessageID int64
	QueueIDs  []int64
}

// Message is one row of mf_messages.
type Message struct {
	ID          int64
	Inbound     string
	ReceivedAt  time.Time
	ControlID   string
	MessageType string
	Payload     []byte
	Status      string
	Error       string
}

// QueueRow is one row of mf_queue.
type QueueRow struct {
	ID            int64
	MessageID     int64
	Destination   string
	Lane          string
	Status        string
	Attempts      int64
	NextAttemptAt time.Time
	// Held marks a pending head parked by QueueHold: its lane is blocked
	// until an operator releases or skips it.
	Held           bool
	LeaseOwner     string
	LeaseExpiresAt *time.Time
	// LastError says why the last delivery failed, in the engine's words;
	// LastErrorDetail is the destination's own explanation, if any (PHI:
	// see QueueRetryParams.Detail). Only MessageRead and QueueLanes read
	// the detail; a claimed row leaves it empty.
	LastError       string
	LastErrorDetail string
	CreatedAt       time.Time
	UpdatedAt       time.Time
	// ResentAs is, on a dead row an operator resent (QueueResendDead,
	// MessageResend), the id of the new row of its message; 0 on a row not
	// resent. Only MessageRead reads it.
	ResentAs int64
}

// MessageDetail is a message and its queue rows.
type MessageDetail struct {
	Message Message
	Queue   []QueueRow
}

// MessageSearchParams are the arguments of Store.MessageSearch.
type MessageSearchParams struct {
	// Since and Until bound received_at: Since <= received_at < Until.
	// Since is required; a zero Until is no upper bound.
	Since, Until time.Time
	// ControlID, Inbound and Status match exactly when set.
	ControlID string
	Inbound   string
	Status    string
	// BeforeID, when set, is the last message of the page before: only the
	// messages after it in the order of the search are listed. If it is
	// gone (purged), only those of lower ids are.
	BeforeID int64
	// Limit bounds the messages listed (1 to MaxSearchLimit).
	Limit int
}

// MaxSearchLimit is the most messages one MessageSearch lists: the API's
// most a page (1,000) and one more, which tells it whether a next page
// exists.
const MaxSearchLimit = 1001

// CheckSearch refuses a search no dialect should run: one with no lower
// bound on received_at (it would read the whole table) or an out-of-range
// limit.
func (p MessageSearchParams) CheckSearch() error {
	switch {
	case p.Since.IsZero():
		return errors.New("storage: a message search needs a lower bound on received_at (Since)")
	case !p.Until.IsZero() && !p.Until.After(p.Since):
		return fmt.Errorf("storage: a message search's window is empty (until %s is not after since %s)", p.Until, p.Since)
	case p.Limit < 1 || p.Limit > MaxSearchLimit:
		return fmt.Errorf("storage: a message search's limit must be 1 to %d, not %d", MaxSearchLimit, p.Limit)
	}
	return nil
}

// SearchUntil is p.Until, or, when it is zero, the last time every dialect
// can store (9999-12-31): no upper bound.
func (p MessageSearchParams) SearchUntil() time.Time {
	if p.Until.IsZero() {
		return time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	}
	return p.Until
}

// SearchBefore is p.BeforeID, or, when it is zero, the highest id: no
// cursor.
func (p MessageSearchParams) SearchBefore() int64 {
	if p.BeforeID <= 0 {
		return math.MaxInt64
	}
	return p.BeforeID
}

// MessageSummary is a message as a search lists it: Message without its
// Payload, and its queue rows with only ID, MessageID, Destination and
// Status set, in id order.
type MessageSummary struct {
	Message Message
	Queue   []QueueRow
}

// AppendSummary adds one row of a search's result (a message and one of
// its queue rows, the queue row's columns NULL, nil here, for a message with
// none) to out, in which the rows of one message come together: a dialect's
// search joins each message of the page with its queue rows.
func AppendSummary(out []MessageSummary, m Message, qID *int64, qDest, qStatus *string) []MessageSummary {
	if n := len(out); n == 0 || out[n-1].Message.ID != m.ID {
		out = append(out, MessageSummary{Message: m, Queue: []QueueRow{}})
	}
	if qID != nil {
		last := &out[len(out)-1]
		r := QueueRow{ID: *qID, MessageID: m.ID}
		if qDest != nil {
			r.Destination = *qDest
		}
		if qStatus != nil {
			r.Status = *qStatus
		}
		last.Queue = append(last.Queue, r)
	}
	return out
}

// MessageResendParams are the arguments of Store.MessageResend.
type MessageResendParams struct {
	MessageID int64
	// Deliveries get one new pending queue row each, in this order; their
	// lanes as MessageIngest takes them (NewMessage.Storable).
	Deliveries []Delivery
}

// QueueResendDeadParams are the arguments of Store.QueueResendDead.
type QueueResendDeadParams struct {
	Destination string
	// Since and Until bound when the dead rows were set aside (their
	// updated_at, the database clock): Since <= updated_at < Until. A zero
	// time is no bound.
	Since, Until time.Time
	// Limit bounds the rows resent; 0 is all.
	Limit int
	// Lane gives the lane of each dead row's new row: the one the routes in
	// force give its message for Destination now, as the ingest computes it
	// and stores it (NewMessage.Storable), not the dead row's own, which is
	// a lane of the lane_key the row was queued under. A skip other than
	// ResendQueued leaves the row as it is (dead, not marked resent: a later
	// call looks at it again) and is counted in ResentDead. Required; it is
	// called in the transaction that holds the dead rows, so it must be
	// quick and touch no store.
	Lane func(DeadRow) (lane string, skip ResendSkip)
}

// DeadRow is a dead row QueueResendDead may resend, with its message as
// stored, for QueueResendDeadParams.Lane.
type DeadRow struct {
	ID, MessageID int64
	// Lane is the dead row's lane.
	Lane    string
	Inbound string
	Payload []byte
}

// ResendSkip says whether QueueResendDeadParams.Lane resends a dead row,
// and why not.
type ResendSkip int

const (
	// ResendQueued: the row is resent in the lane given.
	ResendQueued ResendSkip = iota
	// ResendNotRouted: the routes in force no longer send the row's message
	// to the destination, so the ingest would not queue it there.
	ResendNotRouted
	// ResendUnparsable: the message's stored bytes do not parse as HL7 v2,
	// so its lane cannot be computed (the ingest would reject it).
	ResendUnparsable
)

// ResentDead is what Store.QueueResendDead did: how many dead rows it
// resent, and the lowest and highest of the new queue ids (0 with none),
// and how many it left as they were, by QueueResendDeadParams.Lane's
// reason.
type ResentDead struct {
	Resent                int
	FirstID, LastID       int64
	NotRouted, Unparsable int
}

// ResendChunk is what one transaction of Store.QueueResendDead did
// (ResendDead).
type ResendChunk struct {
	// Last is the id of the last dead row it looked at; 0 when none was left.
	Last int64
	// Old and New are the ids of the dead rows it resent and of their new
	// rows, in that order.
	Old, New []int64
	// NotRouted and Unparsable count the dead rows it left as they were.
	NotRouted, Unparsable int
}

// ErrNoResendLane is QueueResendDead's error without a
// QueueResendDeadParams.Lane.
var ErrNoResendLane = errors.New("storage: a resend-dead needs the lanes of the routes in force (QueueResendDeadParams.Lane)")

// Relane gives each of rows (a transaction's dead rows, in id order) the
// lane of its new row, p.Lane's: it returns those to resend, in that order,
// with their new lanes, and counts the others in c.
func (p QueueResendDeadParams) Relane(rows []DeadRow) (resend []DeadRow, c ResendChunk) {
	for _, r := range rows {
		c.Last = r.ID
		lane, skip := p.Lane(r)
		switch skip {
		case ResendQueued:
			r.Lane = lane
			resend = append(resend, r)
		case ResendNotRouted:
			c.NotRouted++
		default:
			c.Unparsable++
		}
	}
	return resend, c
}

// ResendDeadChunk is the most dead rows one transaction of
// Store.QueueResendDead resends: each holds the ingest lock (on SQLite, the
// one writer) while it inserts, so that an ingest waits at most for this
// many rows.
const ResendDeadChunk = 1000

// ResendDead runs QueueResendDead for each dialect, one transaction at a
// time: chunk(after, before, n) looks at at most n of the destination's
// dead rows not resent yet with after < id (and id < before, when before
// is not 0), in id order, in one transaction, resends those
// QueueResendDeadParams.Lane queues (QueueResendDeadParams.Relane) and
// says what it did. It goes on until a chunk finds none or limit rows are
// resent (rows left as they were do not count). before is the first new
// id: rows queued after the call began are left for the next call.
func ResendDead(limit int, chunk func(after, before int64, n int) (ResendChunk, error)) (ResentDead, error) {
	var res ResentDead
	after := int64(0)
	for limit <= 0 || res.Resent < limit {
		n := ResendDeadChunk
		if limit > 0 {
			n = min(n, limit-res.Resent)
		}
		c, err := chunk(after, res.FirstID, n)
		if err != nil {
			return res, err
		}
		if c.Last == 0 {
			break
		}
		if len(c.Old) != len(c.New) {
			return res, fmt.Errorf("%d dead rows resent as %d new rows", len(c.Old), len(c.New))
		}
		res.NotRouted += c.NotRouted
		res.Unparsable += c.Unparsable
		if len(c.New) > 0 {
			if res.FirstID == 0 {
				res.FirstID = c.New[0]
			}
			res.LastID = c.New[len(c.New)-1]
			res.Resent += len(c.Old)
		}
		after = c.Last
	}
	return res, nil
}

// MessagePurgeParams are the arguments of Store.MessagePurge.
type MessagePurgeParams struct {
	Fence     Fence
	OlderThan time.Duration
	// Limit bounds the queue rows and the messages deleted by one call
	// (DefaultPurgeLimit when zero); call again while it deletes something.
	Limit int
}

// PurgeResult counts what a purge deleted.
type PurgeResult struct {
	QueueRows int64
	Messages  int64
	// Nodes counts the mf_nodes rows deleted: nodes not seen since the
	// cut-off (stopped or crashed; every restart with an automatic node id
	// leaves one).
	Nodes int64
	// More says the call stopped at its limit with rows still to look at
	// although it deleted less than a full batch (the walk for messages
	// that were never queued): call again.
	More bool
}

// QueueClaimNextParams are the arguments of Store.QueueClaimNext.
type QueueClaimNextParams struct {
	Fence Fence
	Lane  string
	// Owner holds the row lease: the claiming node (process). It is not
	// the fence owner: a single-node process has the zero fence, yet a
	// restarted process must see its predecessor's rows as another
	// owner's, so that promotion recovery re-pends them.
	Owner string
	// LeaseTTL is the row lease: the claim expires at db_now + LeaseTTL.
	LeaseTTL time.Duration
	// From is a floor for the head lookup: the id of a row this lane has
	// claimed before (any claim, whatever became of it), or 0. Once a row
	// has been its lane's head, every lower id of the lane is finished for
	// good (finished rows never come back, and no lower id can commit
	// later), so the head is never below it. The floor lets the lookup start
	// there instead of at the lane's first index entry: in PostgreSQL (and
	// SQL Server's ghost records) the entries of finished rows stay in the
	// lane-head index until vacuum, and a busy lane's claim otherwise walks
	// past all of them, more on every claim.
	From int64
}

// QueueClaim is a claimed lane head with the message to deliver.
type QueueClaim struct {
	Row     QueueRow
	Payload []byte
	// ControlID of the message, for logs (never log the payload).
	ControlID string
	// AttemptsAtRetry is Row.Attempts when an operator last retried the
	// row (QueueRelease), 0 if never. Row.Attempts grows by each claim,
	// less those never sent (taken back by QueueGiveBack, QueueReleaseOwn
	// and QueueRecoverForeign); it tells a stale claim from this one (see
	// Claim) and is the total the API shows; a destination's max_attempts
	// counts AttemptsSinceRetry.
	AttemptsAtRetry int64
}

// AttemptsSinceRetry is how many attempts c's row has had since an
// operator last retried it, this one included (all of them if never): an
// operator's retry gives the row a fresh set of max_attempts.
func (c QueueClaim) AttemptsSinceRetry() int64 {
	return c.Row.Attempts - c.AttemptsAtRetry
}

// Claim identifies the claim that c is, for the writes that finish it.
func (c QueueClaim) Claim() Claim {
	return Claim{ID: c.Row.ID, Owner: c.Row.LeaseOwner, Attempt: c.Row.Attempts}
}

// Claim identifies one claim of a queue row: the row and the attempt number
// the claim gave it, and the owner it was made with. A later claim of the
// same row by the same owner has a higher attempt, so a stale claim can
// never finish a row claimed again: the attempts a give-back takes back
// (QueueGiveBack, QueueReleaseOwn) are of claims whose owner has let go of
// them, and those promotion recovery takes back (QueueRecoverForeign) are
// of another owner's.
type Claim struct {
	ID int64
	// Owner is the row lease's owner the claim was made with.
	Owner   string
	Attempt int64
}

// QueueCompleteParams are the arguments of Store.QueueComplete.
type QueueCompleteParams struct {
	Fence Fence
	Claim Claim
	// Lane is the claim's lane, when the caller knows it: a store may use it
	// to keep a lane whose rows another session holds locked from holding
	// up the others (storage/postgres/lanebatch.go). Optional.
	Lane string
}

// QueueAdvanceParams are the arguments of Store.QueueAdvance: the claim to
// complete and the lane whose next head to claim (the claim's own lane).
type QueueAdvanceParams struct {
	Fence Fence
	Claim Claim
	// Lane, Owner and LeaseTTL are those of QueueClaimNextParams.
	Lane     string
	Owner    string
	LeaseTTL time.Duration
	// Ahead is how many rows right behind the new head to claim with it, at
	// most: the lane's next unfinished rows in id order, each pending (not
	// held, due) or in flight under an expired lease, stopping at the first
	// that is neither. 0 claims the head alone.
	Ahead int
}

// QueueGiveBackParams are the arguments of Store.QueueGiveBack.
type QueueGiveBackParams struct {
	Fence  Fence
	Claims []Claim
	// Lane is the claims' lane, as in QueueCompleteParams. Optional.
	Lane string
	// Error and Detail, when Error is not empty, are recorded as the first
	// claim's last error (QueueRow.LastError), the others' kept: why its
	// send wrote nothing (the destination unreachable), for GET /lanes.
	Error, Detail string
}

// Noted returns the error and detail to record on the i-th claim: p's for
// the first, none ("") for the others.
func (p QueueGiveBackParams) Noted(i int) (errorText, detail string) {
	if i != 0 {
		return "", ""
	}
	return p.Error, p.Detail
}

// QueueReleaseOwnParams are the arguments of Store.QueueReleaseOwn.
type QueueReleaseOwnParams struct {
	Fence Fence
	Lane  string
	// Owner is the row lease owner whose rows of Lane go back
	// (QueueClaimNextParams.Owner).
	Owner string
}

// QueueAdvanced is the outcome of Store.QueueAdvance.
type QueueAdvanced struct {
	// Completed is false when the claim was no longer current (its lease
	// expired and the row was reclaimed, or it is gone): the row will be
	// delivered again, as after QueueComplete's ErrClaimLost.
	Completed bool
	// Next is the lane's next head, claimed, or nil when the lane has
	// nothing claimable now.
	Next *QueueClaim
	// Ahead are the rows claimed right behind Next (QueueAdvanceParams.
	// Ahead), in id order: the lane's next rows after Next, none skipped.
	Ahead []QueueClaim
}

// QueueRetryParams are the arguments of Store.QueueRetry.
type QueueRetryParams struct {
	Fence Fence
	Claim Claim
	// Delay until the row is due again, on the database clock.
	Delay time.Duration
	Error string
	// Detail is the destination's own explanation (lanes.DeliveryError's
	// Detail), kept apart from Error: it may quote the message's fields, so
	// only a reader with MESSAGE_READ sees it.
	Detail string
}

// QueueDeadParams are the arguments of Store.QueueDead.
type QueueDeadParams struct {
	Fence Fence
	Claim Claim
	Error string
	// Detail is the destination's own explanation (lanes.DeliveryError's
	// Detail), kept apart from Error: it may quote the message's fields, so
	// only a reader with MESSAGE_READ sees it.
	Detail string
}

// QueueHoldParams are the arguments of Store.QueueHold.
type QueueHoldParams struct {
	Fence Fence
	Claim Claim
	Error string
	// Detail is the destination's own explanation (lanes.DeliveryError's
	// Detail), kept apart from Error: it may quote the message's fields, so
	// only a reader with MESSAGE_READ sees it.
	Detail string
}

// QueueReleaseParams are the arguments of Store.QueueRelease.
type QueueReleaseParams struct {
	ID int64
}

// QueueSkipParams are the arguments of Store.QueueSkip.
type QueueSkipParams struct {
	ID     int64
	Reason string
}

// QueueActed is the row an operator's retry or skip (QueueRelease,
// QueueSkip) changed, as its audit log line names it: the queue id alone
// says nothing once the row is purged, and nothing can be looked up by it.
type QueueActed struct {
	MessageID   int64
	Destination string
}

// QueueExtendLeaseParams are the arguments of Store.QueueExtendLease.
type QueueExtendLeaseParams struct {
	Fence Fence
	Claim Claim
	TTL   time.Duration
}

// QueueRecoverForeignParams are the arguments of Store.QueueRecoverForeign.
type QueueRecoverForeignParams struct {
	Fence Fence
	// Owner's rows are left in flight; rows leased by anyone else are
	// re-pended. Promotion passes "" (no row is leased by ""): at promotion
	// no graph of this process runs either (actors/root.go, recover).
	Owner string
}

// QueueReclaimExpiredParams are the arguments of Store.QueueReclaimExpired.
type QueueReclaimExpiredParams struct {
	Fence Fence
}

// QueueLanesParams are the arguments of Store.QueueLanes.
type QueueLanesParams struct {
	// After is the last lane of the previous page ("": from the first).
	After string
	// Limit bounds the page; 0 lists every lane.
	Limit int
}

// LanesPage is how many lanes one statement of a listing with no Limit
// reads (Store.QueueLanes).
const LanesPage = 5000

// AllLanes lists every lane with work through page, a dialect's one-page
// QueueLanes, a LanesPage at a time. On PostgreSQL, with 500,000 unfinished
// rows in 50,000 lanes, the whole listing as one statement was a hash
// aggregate of every row, a hash join of the heads and a sort spilled to
// disk (0.73 to 0.93 s); walked in pages of the lane head index, 0.45 to
// 0.61 s (bench/backlogfailover -explain).
func AllLanes(ctx context.Context, page func(context.Context, QueueLanesParams) ([]LaneSummary, error)) ([]LaneSummary, error) {
	var out []LaneSummary
	p := QueueLanesParams{Limit: LanesPage}
	for {
		ls, err := page(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
		if len(ls) < p.Limit {
			return out, nil
		}
		p.After = ls[len(ls)-1].Lane
	}
}

// LaneSummary describes one lane with work.
type LaneSummary struct {
	Lane        string
	Destination string
	// Depth counts the lane's pending and in-flight rows.
	Depth int64
	// Head is the lane's lowest pending or in-flight row.
	Head QueueRow
	// HeadAge is how long the head has been queued, on the database clock.
	HeadAge time.Duration
	// Claimable is true when a claim would take the head now: pending, not
	// held and due, or in flight under an expired lease (a stranded head).
	Claimable bool
}

// Blocked reports whether the lane waits for an operator (its head is held).
func (l LaneSummary) Blocked() bool { return l.Head.Held }

// QueueStat counts the queue rows of one destination in one status.
type QueueStat struct {
	Destination string
	Status      string
	Count       int64
	// Held counts those held for an operator: each is the head of a
	// blocked lane (LaneSummary.Blocked).
	Held int64
	// OldestAge is how long the oldest of them has been queued, on the
	// database's clock (zero for dead rows): an operator alerts on it.
	OldestAge time.Duration
}

// MaxLaneKeyBytes bounds QueueLaneKeyRecordParams.LaneKey, the width of
// the column in every dialect.
const MaxLaneKeyBytes = 1000

// QueueLaneKeyRecordParams are the arguments of Store.QueueLaneKeyRecord.
type QueueLaneKeyRecordParams struct {
	Fence       Fence
	Destination string
	// LaneKey says how the destination's messages are split into lanes
	// (lanes.LaneKeys makes it from the routes).
	LaneKey string
}

// QueueRelaneReadParams are the arguments of Store.QueueRelaneRead.
type QueueRelaneReadParams struct {
	Destination string
	// AfterLane and AfterID are the last row of the previous page; the
	// first page has "" and 0.
	AfterLane string
	AfterID   int64
	Limit     int
}

// RelaneRow is an unfinished queue row to lane again, with what its lane
// is computed from.
type RelaneRow struct {
	ID      int64
	Lane    string
	Inbound string
	Payload []byte
}

// LaneMove moves queue row ID to Lane.
type LaneMove struct {
	ID   int64
	Lane string
}

// QueueRelaneParams are the arguments of Store.QueueRelane.
type QueueRelaneParams struct {
	Fence Fence
	Moves []LaneMove
}

// OutboundHoldParams are the arguments of Store.OutboundHold.
type OutboundHoldParams struct {
	// Outbound is the [[outbound]] name (at most MaxOutboundBytes).
	Outbound string
}

// OutboundReleaseParams are the arguments of Store.OutboundRelease.
type OutboundReleaseParams struct {
	Outbound string
}

// OutboundHeld is one held outbound.
type OutboundHeld struct {
	Outbound string
	// Since is when it was held, on the database clock.
	Since time.Time
}

// MaxOutboundBytes bounds an outbound name OutboundHold stores: SQL
// Server keys it as it keys destinations, in an NVARCHAR(450). The config
// allows names of 200 bytes at most.
const MaxOutboundBytes = 450

// CheckOutbound refuses an outbound name OutboundHold would store wrongly
// or not at all: empty, longer than MaxOutboundBytes, or not valid text.
func CheckOutbound(name string) error {
	if name == "" || len(name) > MaxOutboundBytes || ValidText(name) != name {
		return fmt.Errorf("storage: outbound name %q must be 1 to %d bytes of UTF-8 without NUL", name, MaxOutboundBytes)
	}
	return nil
}

// Secret limits, the same in every dialect: SQL Server keeps a name in an
// NVARCHAR(128) key and a value in a VARBINARY(256).
const (
	// MaxSecretName is the longest secret name, in bytes.
	MaxSecretName = 128
	// MaxSecretBytes is the longest secret value.
	MaxSecretBytes = 256
)

// CheckSecret refuses a secret that Store.Secret would store wrongly or not
// at all: an empty name, a name longer than MaxSecretName bytes, or a value
// that is empty (an empty key would key nothing, for good) or longer than
// MaxSecretBytes.
func CheckSecret(name string, fresh []byte) error {
	switch {
	case name == "" || len(name) > MaxSecretName:
		return fmt.Errorf("storage: secret name %q must be 1 to %d bytes", name, MaxSecretName)
	case len(fresh) == 0 || len(fresh) > MaxSecretBytes:
		return fmt.Errorf("storage: secret %q: a new value must be 1 to %d bytes, not %d", name, MaxSecretBytes, len(fresh))
	}
	return nil
}

// DefaultConfigName is the name of the graph's config version token.
const DefaultConfigName = "graph"

// QueueVersionName names the version token of the queue changes that no
// lane is told of: an operator's retry or skip, a resend, an outbound held
// or released (from any node's API) and the rows re-pended by the sweep or
// by promotion recovery. The stores bump it
// in the transaction of the change, and the leader's lane manager reads it
// to tell whether it must look at every lane again (lanes.Manager); the
// graph's config token (DefaultConfigName) is not touched, so no node
// reloads its config.
const QueueVersionName = "queue"

// ConfigName returns name, or DefaultConfigName when it is empty.
func ConfigName(name string) string {
	if name == "" {
		return DefaultConfigName
	}
	return name
}

// ConfigVersionBumpParams are the arguments of Store.ConfigVersionBump.
type ConfigVersionBumpParams struct {
	Name string
}

// ConfigVersionReadParams are the arguments of Store.ConfigVersionRead.
type ConfigVersionReadParams struct {
	Name string
}

// LocalHost reports whether host, a database server's name or address in a
// store url, is this machine (localhost or a loopback address): connections
// to it never cross a network, so they need no encryption. Each dialect
// warns at start when its url lets connections to any other host go
// unencrypted.
func LocalHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package actors

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/storage"
)

// PurgeInterval is how often the leader purges finished rows past retention.
const PurgeInterval = time.Hour

// purgeFirst is how long after the graph starts it first purges, and
// purgeLimit the rows one purge call deletes (variables for tests).
var (
	purgeFirst = time.Minute
	purgeLimit = storage.DefaultPurgeLimit
)

type reclaimTick struct{}
type purgeTick struct{}

// purgePause is the pause after a purge call that left more to purge, in
// multiples of the call's own time: a call of 10,000 rows took 0.4 to 0.8 s
// on the 2-core machine of the README's figures (measured with a backlog of
// 400,000 finished messages), so a backlog goes at 10,000 rows every 1.6 to
// 3.2 s while live traffic keeps three quarters of the time.
const purgePause = 3

// purgeRound is the next purge call of a run that has not caught up yet.
type purgeRound struct{}

// sweeper runs the leader's recurring maintenance: it re-pends rows whose
// lease expired (a delivery that died without finishing) and purges finished
// rows older than [store] retention_days. It is a child of the graph, so it
// runs only on the leader and never twice.
type sweeper struct {
	spec   *graphSpec
	log    zerolog.Logger
	timers []scheduler.CancelFunc
	// round cancels the timer of a purge run's next call; it is set while
	// a run goes on. purged counts what the run has deleted so far.
	round  scheduler.CancelFunc
	purged storage.PurgeResult
	// failing counts the failed calls since the last that worked, so that
	// a database away is logged when it starts, once a minute while it
	// lasts and when it ends, not at every tick.
	failing storage.Outage
}

func newSweeper(spec *graphSpec, log zerolog.Logger) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &sweeper{spec: spec, log: log.With().Str("component", "sweeper").Logger()}
	})
}

// Receive implements actor.Actor.
func (s *sweeper) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		t := scheduler.NewTimerScheduler(ctx)
		reclaim := s.spec.cfg.Cluster.ReclaimInterval()
		s.timers = append(s.timers,
			t.SendRepeatedly(reclaim, reclaim, ctx.Self(), reclaimTick{}),
			t.SendRepeatedly(purgeFirst, PurgeInterval, ctx.Self(), purgeTick{}))
	case reclaimTick:
		n, err := s.spec.store.QueueReclaimExpired(s.spec.ctx, storage.QueueReclaimExpiredParams{Fence: s.spec.fence})
		if s.failed("queue_reclaim_expired", err) {
			return
		}
		s.worked()
		if n > 0 {
			s.log.Warn().Int64("rows", n).Msg("re-pended deliveries whose lease expired (a delivery outlived [store] lease_ttl_seconds); they will be delivered again")
		}
	case purgeTick:
		if s.round != nil {
			return // the run in progress catches up to this tick too
		}
		s.purged = storage.PurgeResult{}
		s.purge(ctx)
	case purgeRound:
		s.purge(ctx)
	case *actor.Stopping, *actor.Restarting:
		for _, cancel := range s.timers {
			cancel()
		}
		if s.round != nil {
			s.round()
			s.purgeDone()
		}
	}
}

// purge makes one purge call of a run. A call that deletes a full batch, or
// says More, leaves more behind: the next one follows after a pause of
// purgePause times what the call took, so a backlog of any size is worked
// through at once, at most a quarter of the time in the database (the lanes
// and ingest write in between, and keep most of a small machine's cores;
// each of a call's transactions holds the fence's lock, which an election
// waits for), and each call is a message of
// its own, so a stop does not wait for the whole run. A run bounded per hourly tick deleted fewer
// rows than a busy node finishes in an hour, and the store grew without end.
func (s *sweeper) purge(ctx actor.Context) {
	start := time.Now()
	r, err := s.spec.store.MessagePurge(s.spec.ctx, storage.MessagePurgeParams{
		Fence: s.spec.fence, OlderThan: s.spec.cfg.Store.Retention(), Limit: purgeLimit,
	})
	if s.failed("message_purge", err) {
		s.purgeDone()
		return
	}
	s.worked()
	s.purged.QueueRows += r.QueueRows
	s.purged.Messages += r.Messages
	s.purged.Nodes += r.Nodes
	if r.QueueRows < int64(purgeLimit) && r.Messages < int64(purgeLimit) && !r.More {
		s.purgeDone()
		return
	}
	s.round = scheduler.NewTimerScheduler(ctx).SendOnce(purgePause*time.Since(start), ctx.Self(), purgeRound{})
}

// purgeDone ends the purge run and says what it deleted.
func (s *sweeper) purgeDone() {
	s.round = nil
	if s.purged != (storage.PurgeResult{}) {
		s.log.Info().Int64("queue_rows", s.purged.QueueRows).Int64("messages", s.purged.Messages).Int64("nodes", s.purged.Nodes).
			Msg("purged finished rows, and nodes not seen, past retention")
	}
}

func (s *sweeper) failed(op string, err error) bool {
	if err == nil {
		return false
	}
	storage.CountError(s.spec.ctx, op, err)
	if errors.Is(err, storage.ErrFenced) {
		s.spec.onFenced(op, err)
		return true
	}
	if s.spec.ctx.Err() == nil {
		if log, n := s.failing.Failed(time.Now()); log {
			s.log.Error().Err(err).Str("op", op).Int("failures", n).
				Msg("maintenance failed; it runs again at the next tick, logged once a minute while it fails (check the database)")
		}
	}
	return true
}

// worked ends the failures of the maintenance calls, if any were counted,
// with a line that says how many there were.
func (s *sweeper) worked() {
	if n := s.failing.Over(); n > 0 {
		s.log.Info().Int("failures", n).Msg("maintenance works again")
	}
}

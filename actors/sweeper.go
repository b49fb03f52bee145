package actors

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/storage"
)

// PurgeInterval is how often the leader purges finished rows past retention.
const PurgeInterval = time.Hour

// purgeRounds bounds the purge calls of one tick (each deletes at most
// storage.DefaultPurgeLimit rows), so a huge backlog is spread over ticks.
const purgeRounds = 20

type reclaimTick struct{}
type purgeTick struct{}

// sweeper runs the leader's recurring maintenance: it re-pends rows whose
// lease expired (a delivery that died without finishing) and purges finished
// rows older than [store] retention_days. It is a child of the graph, so it
// runs only on the leader and never twice.
type sweeper struct {
	spec   *graphSpec
	log    zerolog.Logger
	timers []scheduler.CancelFunc
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
			t.SendRepeatedly(time.Minute, PurgeInterval, ctx.Self(), purgeTick{}))
	case reclaimTick:
		n, err := s.spec.store.QueueReclaimExpired(s.spec.ctx, storage.QueueReclaimExpiredParams{Fence: s.spec.fence})
		if s.failed("queue_reclaim_expired", err) {
			return
		}
		if n > 0 {
			s.log.Warn().Int64("rows", n).Msg("re-pended deliveries whose lease expired (a delivery outlived [store] lease_ttl_seconds); they will be delivered again")
		}
	case purgeTick:
		var total storage.PurgeResult
		for i := 0; i < purgeRounds; i++ {
			r, err := s.spec.store.MessagePurge(s.spec.ctx, storage.MessagePurgeParams{
				Fence: s.spec.fence, OlderThan: s.spec.cfg.Store.Retention(),
			})
			if s.failed("message_purge", err) {
				return
			}
			total.QueueRows += r.QueueRows
			total.Messages += r.Messages
			if r == (storage.PurgeResult{}) {
				break
			}
		}
		if total != (storage.PurgeResult{}) {
			s.log.Info().Int64("queue_rows", total.QueueRows).Int64("messages", total.Messages).Msg("purged finished rows past retention")
		}
	case *actor.Stopping, *actor.Restarting:
		for _, cancel := range s.timers {
			cancel()
		}
	}
}

func (s *sweeper) failed(op string, err error) bool {
	if err == nil {
		return false
	}
	lanes.StoreError(op)
	if errors.Is(err, storage.ErrFenced) {
		s.spec.onFenced(op, err)
		return true
	}
	if s.spec.ctx.Err() == nil {
		s.log.Error().Err(err).Str("op", op).Msg("maintenance failed; it runs again at the next tick (check the database)")
	}
	return true
}

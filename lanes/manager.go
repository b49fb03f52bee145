package lanes

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/messagefoundry/mf/config"
)

// RescanInterval is how often the manager looks for lanes with claimable
// work that no actor is delivering: heads re-pended by the sweep, by
// promotion recovery or by an operator, and lanes whose actor was stopped.
const RescanInterval = 2 * time.Second

// Ingested tells the lane manager which lanes received new rows.
type Ingested struct {
	Lanes []string
}

type rescan struct{}

// Manager spawns one lane actor per lane with work and stops it when its lane
// runs dry. It owns the destinations' senders, shared by their lanes.
type Manager struct {
	env     *Env
	dests   map[string]config.Outbound
	senders map[string]Sender
	lanes   map[string]*actor.PID
	wakes   map[string]int
	timer   scheduler.CancelFunc
}

// NewManager returns the props of a lane manager for env.
func NewManager(env *Env) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &Manager{env: env}
	})
}

// Receive implements actor.Actor.
func (m *Manager) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		m.start(ctx)
	case Ingested:
		for _, lane := range msg.Lanes {
			m.wake(ctx, lane)
		}
	case rescan:
		m.rescan(ctx)
	case idle:
		if pid, ok := m.lanes[msg.lane]; ok && m.wakes[msg.lane] == msg.wakes {
			ctx.Stop(pid)
			delete(m.lanes, msg.lane)
			delete(m.wakes, msg.lane)
		}
	case *actor.Stopping:
		if m.timer != nil {
			m.timer()
		}
	case *actor.Stopped, *actor.Restarting:
		// Children (the lanes) have stopped: no one uses the senders now.
		for name, s := range m.senders {
			if err := s.Close(); err != nil {
				m.env.Log.Warn().Err(err).Str("destination", name).Msg("closing the destination's connections failed")
			}
		}
	}
}

func (m *Manager) start(ctx actor.Context) {
	m.dests = map[string]config.Outbound{}
	m.senders = map[string]Sender{}
	m.lanes = map[string]*actor.PID{}
	m.wakes = map[string]int{}
	for _, o := range m.env.Config.Outbound {
		s, err := NewSender(o)
		if err != nil {
			// Config validation makes this unreachable short of a bad
			// certificate file; the lanes of o wait until it is fixed.
			m.env.Log.Error().Err(err).Str("destination", o.Name).Msg("cannot set up the destination; its lanes will not deliver until the config is fixed and reloaded")
			continue
		}
		m.dests[o.Name] = o
		m.senders[o.Name] = s
	}
	m.timer = scheduler.NewTimerScheduler(ctx).SendRepeatedly(0, RescanInterval, ctx.Self(), rescan{})
}

// wake makes sure lane has an actor and tells it to look for work.
func (m *Manager) wake(ctx actor.Context, lane string) {
	pid, ok := m.lanes[lane]
	if !ok {
		dest := DestinationOf(lane)
		o, known := m.dests[dest]
		if !known {
			return // logged once at start, or a destination removed from the config
		}
		sender, env := m.senders[dest], m.env
		// A fresh actor per (re)start: a restarted lane starts from the store.
		pid = ctx.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor {
			return &laneActor{lane: lane, dest: o, sender: sender, env: env}
		}), "lane")
		m.lanes[lane] = pid
	}
	m.wakes[lane]++
	ctx.Send(pid, Wake{})
}

func (m *Manager) rescan(ctx actor.Context) {
	if m.env.Ctx.Err() != nil {
		return
	}
	lanes, err := m.env.Store.QueueLanes(m.env.Ctx)
	if err != nil {
		StoreError("queue_lanes")
		m.env.Log.Error().Err(err).Msg(fmt.Sprintf("listing lanes with work failed; retrying in %v (check the database)", RescanInterval))
		return
	}
	for _, l := range lanes {
		if l.Claimable {
			m.wake(ctx, l.Lane)
		}
	}
}

// DestinationOf returns the destination part of a lane name.
func DestinationOf(lane string) string {
	for i := 0; i < len(lane); i++ {
		if lane[i] == '/' {
			return lane[:i]
		}
	}
	return lane
}

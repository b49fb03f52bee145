// Package listeners holds the inbound side of the graph: the MLLP listener
// actors (one per [[inbound]] of type mllp, binding their port only while the
// graph runs, that is only on the leader), the file-poll inbound, and the
// ingest actor that commits the messages of many connections in one
// transaction (group commit) before any of them is acknowledged.
package listeners

import (
	"context"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/storage"
)

// Env is what the inbound actors of one graph share.
type Env struct {
	// Ctx is cancelled when the leader term ends.
	Ctx    context.Context
	Store  storage.Store
	Fence  storage.Fence
	Log    zerolog.Logger
	Router *lanes.Router
	// Ingest is the graph's ingest actor; Lanes its lane manager.
	Ingest *actor.PID
	Lanes  *actor.PID
	System *actor.ActorSystem
	// OnFenced is called when a write fails with storage.ErrFenced.
	OnFenced func(op string, err error)
	// LogPayloads (config log_payloads) lets the line about a rejected
	// message carry its bytes; otherwise no log line carries message content.
	LogPayloads bool
	// Binds hears from the MLLP listeners whether they hold their ports
	// (nil: nobody asks; the metric is kept all the same).
	Binds *Binds

	// ingestStopped is closed by the ingest actor (NewIngest makes it) once
	// it has stopped and has given every answer it will ever give.
	ingestStopped chan struct{}
	stopIngest    sync.Once
}

// await waits for the answer to a Submit on reply. A Submit that reached the
// ingest actor after it stopped is a dead letter and is never answered: once
// the actor has stopped, await answers ErrShuttingDown instead (the sender
// gets AE and sends the message again, to the next leader), unless the
// answer is already there. It returns false if killed closes first.
func (env *Env) await(reply <-chan Result, killed <-chan struct{}) (Result, bool) {
	select {
	case r := <-reply:
		return r, true
	case <-env.ingestStopped:
		select {
		case r := <-reply:
			return r, true
		default:
			return Result{Err: ErrShuttingDown}, true
		}
	case <-killed:
		return Result{}, false
	}
}

// payloadLogMax bounds the bytes of a message one log line may carry when
// log_payloads is on.
const payloadLogMax = 4096

// logPayload adds the message's bytes to ev when log_payloads is on.
func (env *Env) logPayload(ev *zerolog.Event, payload []byte) *zerolog.Event {
	if !env.LogPayloads {
		return ev
	}
	if len(payload) > payloadLogMax {
		return ev.Bytes("payload", payload[:payloadLogMax]).Bool("payload_truncated", true)
	}
	return ev.Bytes("payload", payload)
}

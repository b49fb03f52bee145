package listeners

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/storage"
)

// MaxBatch bounds the messages of one ingest transaction.
const MaxBatch = 512

// MaxBatchBytes bounds the bytes of the messages of one ingest transaction;
// a message or a group larger than it goes alone. PostgreSQL takes a
// batch's payloads as one array parameter of one protocol message, which
// may not exceed 1 GB: a larger batch (100 connections each sending a
// 10 MiB document) failed whole, every sender in it was answered AE, and
// the resends formed such a batch again.
const MaxBatchBytes = 64 << 20

// ErrShuttingDown answers a message that arrived while the graph stopped: it
// was not stored, and the sender must send it again (to the next leader).
var ErrShuttingDown = errors.New("the engine is stopping or no longer the leader; message not stored")

// Submit asks the ingest actor to store one message. The outcome is sent on
// Reply, which must have room for it (capacity 1): the sender may only
// acknowledge the message after a nil Result.Err.
type Submit struct {
	Msg   storage.NewMessage
	Reply chan<- Result
}

// LogValue is what a log line shows of a Submit (protoactor logs a dead
// letter, and the message an actor failed on, whole): where it came from and
// its control id, never its bytes.
func (s Submit) LogValue() slog.Value {
	return slog.GroupValue(slog.String("inbound", s.Msg.Inbound), slog.String("control_id", s.Msg.ControlID),
		slog.Int("bytes", len(s.Msg.Payload)))
}

// SubmitGroup asks the ingest actor to store messages that must be stored in
// their order, such as those of one inbound file: the actor never splits a
// group across transactions, and a transaction ends at its first failure
// that is not a refusal (Ingest.store), so when a message of the group is
// not stored, no later one is. Without it, the next transaction could store
// later messages of a lane after an earlier one had failed, and the file,
// read again, would store the earlier one after them. A group should hold
// at most MaxBatch messages (a larger one is stored whole, alone). Each
// Submit's Reply gets its own Result; they may share one channel with room
// for them all.
type SubmitGroup struct {
	Submits []Submit
}

// LogValue is what a log line shows of a SubmitGroup: where it came from,
// how many messages and bytes, never their contents.
func (g SubmitGroup) LogValue() slog.Value {
	inbound, size := "", 0
	for _, s := range g.Submits {
		inbound = s.Msg.Inbound
		size += len(s.Msg.Payload)
	}
	return slog.GroupValue(slog.String("inbound", inbound), slog.Int("messages", len(g.Submits)), slog.Int("bytes", size))
}

// Result is the outcome of a Submit.
type Result struct {
	MessageID int64
	Err       error
}

type committed struct {
	err   error
	lanes lanes.Ingested // the lanes the batch stored rows in, for the lane manager
}

// LogValue: the lanes of a batch carry patient ids (lanes.Ingested).
func (c committed) LogValue() slog.Value {
	return slog.GroupValue(slog.Any("error", c.err), slog.Int("lanes", len(c.lanes.Lanes)))
}

// Ingest is the group-commit actor. While one transaction is being
// committed, arriving messages queue up; when it ends they all go into the
// next one. So under load each transaction carries many messages and the
// store's commit latency is paid once per batch, not once per message, and
// with one connection it degenerates to one message per commit.
type Ingest struct {
	env      *Env
	pending  []queued
	inflight bool
	commits  sync.WaitGroup
	// storing counts the batches that failed in a row (one at a time, so
	// one goroutine touches it at a time), so that a database away is
	// logged when it starts, once a minute and when it ends, not at every
	// batch of every sender's resend.
	storing storage.Outage
}

// queued is a Submit waiting for a transaction.
type queued struct {
	Submit
	more int // how many messages of its SubmitGroup follow it (0: a transaction may end after it)
}

// NewIngest returns the props of the ingest actor. Call it before the
// listeners that share env start: it makes the channel that tells them the
// actor has stopped (Env.await).
func NewIngest(env *Env) *actor.Props {
	env.ingestStopped = make(chan struct{})
	return actor.PropsFromProducer(func() actor.Actor { return &Ingest{env: env} })
}

// Receive implements actor.Actor.
func (in *Ingest) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case Submit:
		in.pending = append(in.pending, queued{Submit: msg})
		if !in.inflight {
			in.flush(ctx)
		}
	case SubmitGroup:
		for i, s := range msg.Submits {
			in.pending = append(in.pending, queued{Submit: s, more: len(msg.Submits) - 1 - i})
		}
		if !in.inflight && len(in.pending) > 0 {
			in.flush(ctx)
		}
	case committed:
		in.inflight = false
		if len(msg.lanes.Lanes) > 0 {
			ctx.Send(in.env.Lanes, msg.lanes)
		}
		if errors.Is(msg.err, storage.ErrFenced) {
			in.env.OnFenced("message_ingest", msg.err)
		}
		if len(in.pending) > 0 {
			in.flush(ctx)
		}
	case *actor.Stopping, *actor.Restarting:
		for _, s := range in.pending {
			s.Reply <- Result{Err: ErrShuttingDown}
		}
		in.pending = nil
		in.commits.Wait() // the transaction in flight answers its senders itself
	case *actor.Stopped:
		// Submits still in the mailbox, and any sent from now on, are dead
		// letters: their senders stop waiting (Env.await). Without this a
		// connection that handed over its message just as the graph stopped
		// waited out the listener's whole Grace, and held up the stop.
		in.env.stopIngest.Do(func() { close(in.env.ingestStopped) })
	}
}

// next takes the messages of the next transaction from the queue: up to
// MaxBatch messages and MaxBatchBytes, cut only between SubmitGroups. The
// first group goes whole, whatever its size.
func (in *Ingest) next() []queued {
	n, size := 0, 0
	for n < len(in.pending) {
		g := 1 + in.pending[n].more // the group starting at n
		gsize := 0
		for _, q := range in.pending[n : n+g] {
			gsize += len(q.Msg.Payload)
		}
		if n > 0 && (n+g > MaxBatch || size+gsize > MaxBatchBytes) {
			break
		}
		n, size = n+g, size+gsize
	}
	batch := in.pending[:n:n]
	in.pending = in.pending[n:]
	return batch
}

// flush commits the queued messages in one transaction, off the actor's
// goroutine, and answers every sender from there when it ends.
func (in *Ingest) flush(ctx actor.Context) {
	batch := in.next()
	in.inflight = true
	in.commits.Add(1)
	self, root := ctx.Self(), ctx.ActorSystem().Root
	go func() {
		defer in.commits.Done()
		msgs := make([]storage.NewMessage, len(batch))
		for i, s := range batch {
			msgs[i] = s.Msg.Storable()
		}
		results, touched, err := in.store(msgs)
		for i, s := range batch {
			s.Reply <- results[i]
		}
		root.Send(self, committed{err: err, lanes: touched})
	}()
}

// store commits msgs in one transaction and returns each one's result, the
// lanes it stored rows in, and the batch's error (the first, for the actor's
// fence check). When the database refuses a value of a message
// (storage.ErrRefused), the batch is split in halves, and halves again, until
// the refused messages stand alone: bad bytes from one sender must not fail
// the others (DESIGN §6), and a refused message would otherwise fail every
// batch it came in, its sender resending it forever. One refused message in
// a batch of n costs about 2·log2(n) more commits, not n. A message refused
// alone is kept as rejected (its bytes, for the operator) and answered AR.
//
// Parts are stored in order, and the first error that is not a refusal ends
// the batch: every message not yet stored gets it (AE). Otherwise a message
// stored after an earlier one of its lane failed would be delivered before
// it once that one is sent again (a file inbound submits many of a lane).
func (in *Ingest) store(msgs []storage.NewMessage) ([]Result, lanes.Ingested, error) {
	results := make([]Result, len(msgs))
	var touched lanes.Ingested
	at := map[string]int{} // lane → its index in touched
	var failed error       // the error that ended the batch
	stored := func(i int, m storage.IngestedMessage) {
		results[i].MessageID = m.MessageID
		if len(m.QueueIDs) != len(msgs[i].Deliveries) {
			// Committed already. No dialect returns this (each refuses a
			// batch a trigger skipped a row of); kept for one that would.
			// Which of the deliveries have rows is not known, so no lane is
			// told; the lanes' full rescan finds the rows there are.
			in.env.Log.Error().Int64("message_id", m.MessageID).Str("inbound", msgs[i].Inbound).Str("control_id", msgs[i].ControlID).
				Int("deliveries", len(msgs[i].Deliveries)).Int("queue_rows", len(m.QueueIDs)).
				Msg("a message was stored with fewer queue rows than its routes gave it (a trigger on mf_queue skipping rows?): the missing deliveries will not be made; " +
					"remove what skips them, then send the message again to the destinations that lack it (GET /messages/{id} shows its rows)")
			return
		}
		for j, d := range msgs[i].Deliveries {
			id := m.QueueIDs[j]
			if k, seen := at[d.Lane]; seen {
				touched.Newest[k] = max(touched.Newest[k], id)
				continue
			}
			at[d.Lane] = len(touched.Lanes)
			touched.Lanes = append(touched.Lanes, d.Lane)
			touched.Newest = append(touched.Newest, id)
		}
	}
	var part func(lo, hi int)
	part = func(lo, hi int) {
		if failed != nil {
			for i := lo; i < hi; i++ {
				results[i].Err = failed
			}
			return
		}
		res, err := in.ingest(msgs[lo:hi])
		switch {
		case err == nil:
			for i := lo; i < hi; i++ {
				stored(i, res[i-lo])
			}
		case !errors.Is(err, storage.ErrRefused):
			failed = err
			part(lo, hi) // answers them all
		case hi-lo == 1:
			results[lo], failed = in.keepRefused(msgs[lo], err)
		default:
			if hi-lo == len(msgs) {
				in.env.Log.Warn().Err(err).Int("messages", len(msgs)).
					Msg("the database refused a value of a message in a batch; storing the others without it")
			}
			mid := lo + (hi-lo)/2
			part(lo, mid)
			part(mid, hi)
		}
	}
	part(0, len(msgs))
	switch {
	case failed == nil:
		if n := in.storing.Over(); n > 0 {
			in.env.Log.Info().Int("failures", n).Msg("storing messages works again")
		}
	case errors.Is(failed, storage.ErrFenced), errors.Is(failed, ErrShuttingDown):
		// The normal end of a term, not a database in trouble.
		in.env.Log.Warn().Err(failed).Int("messages", len(msgs)).
			Msg("a batch of messages was not stored: this node stopped leading (or is stopping); each MLLP sender whose message was not stored gets AE " +
				"(\"this node is no longer the primary\") and sends it again, to the next leader; an inbound file stays and is read again")
	default:
		storage.CountError(in.env.Ctx, "message_ingest", failed)
		if log, n := in.storing.Failed(time.Now()); log {
			in.env.Log.Error().Err(failed).Int("messages", len(msgs)).Int("failures", n).
				Msg("storing a batch of messages failed; each sender whose message was not stored gets AE and will resend (logged once a minute while it lasts)")
		}
	}
	return results, touched, failed
}

// keepRefused stores the bytes of a message the database refused (refused)
// as a rejected message, with no delivery, so that an operator can see what
// came; its Result says refused, which the sender hears as AR. If that store
// fails for any other reason (the fence, the connection), the Result and the
// returned error are that failure: the sender hears AE and sends the message
// again, to be refused and kept then, rather than AR with nothing kept.
func (in *Ingest) keepRefused(m storage.NewMessage, refused error) (Result, error) {
	kept := storage.NewMessage{Inbound: m.Inbound, Payload: m.Payload, Status: storage.MessageRejected,
		Error: "the message store refused a value of this message: " + refused.Error()}
	res, err := in.ingest([]storage.NewMessage{kept})
	switch {
	case errors.Is(err, storage.ErrRefused):
		in.env.Log.Error().Err(err).AnErr("refused", refused).Str("inbound", m.Inbound).Str("control_id", m.ControlID).
			Msg("the database refused a message, and its bytes as a rejected message too: its sender gets AR, and the bytes are not kept (ask the sender for the message by its control id)")
		return Result{Err: refused}, nil
	case err != nil:
		return Result{Err: err}, err
	}
	in.env.Log.Warn().Err(refused).Int64("message_id", res[0].MessageID).Str("inbound", m.Inbound).Str("control_id", m.ControlID).
		Msg("the database refused a value of a message: its bytes are kept as a rejected message (GET /messages/{id}) and its sender gets AR")
	return Result{MessageID: res[0].MessageID, Err: refused}, nil
}

// IngestTimeout bounds one ingest transaction of small messages. A
// statement waiting on a lock held by another session (an operator's LOCK
// TABLE, a VACUUM FULL or a migration run by hand), or a database that does
// not answer, held every sender of the batch, and those queued behind it,
// for as long as it lasted; they now get AE within it and send again.
// Senders commonly wait 10 to 30 s for an ACK; a commit, fsync included,
// takes milliseconds.
const IngestTimeout = 10 * time.Second

// ingestBytesPerSecond is the slowest rate at which a batch's bytes are
// taken for granted to reach the store: each of them adds to IngestTimeout,
// so that a large message (max_message_bytes goes to 512 MiB) or a large
// file is not cut off, and answered AE, at every try, for ever.
const ingestBytesPerSecond = 4 << 20

// ingestTimeout is the time one ingest of msgs is given.
func ingestTimeout(msgs []storage.NewMessage) time.Duration {
	var n int64
	for _, m := range msgs {
		n += int64(len(m.Payload))
	}
	return IngestTimeout + time.Duration(n/ingestBytesPerSecond)*time.Second
}

// errStoreSlow says what a batch cut off by its ingestTimeout ran into.
var errStoreSlow = errors.New("the message store did not answer in time (a lock held on an mf_ table by another session: " +
	"see pg_locks and pg_stat_activity, or sys.dm_tran_locks; a database overloaded or out of connections; on SQLite a disk that does not answer)")

// ingest is one MessageIngest call, its batch size observed.
func (in *Ingest) ingest(msgs []storage.NewMessage) ([]storage.IngestedMessage, error) {
	start := time.Now()
	timeout := ingestTimeout(msgs)
	ctx, cancel := context.WithTimeout(in.env.Ctx, timeout)
	defer cancel()
	res, err := in.env.Store.MessageIngest(ctx, storage.MessageIngestParams{Fence: in.env.Fence, Messages: msgs})
	cancel()
	if err != nil && in.env.Ctx.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w, %s for %d messages: %w", errStoreSlow, timeout, len(msgs), err)
	}
	observeBatch(len(msgs))
	if err != nil && !errors.Is(err, storage.ErrFenced) && !errors.Is(err, storage.ErrRefused) && errors.Is(in.env.Ctx.Err(), context.Canceled) {
		// Cut off by the end of the term (or a stop that did not drain in
		// time), whatever the driver calls it: the senders hear that this
		// node no longer leads, not that the store is unavailable.
		err = fmt.Errorf("%w (%w)", ErrShuttingDown, err)
	}
	if err == nil {
		in.env.Log.Debug().Int("messages", len(msgs)).Time("call_started", start).Msg("messages stored")
	}
	return res, err
}

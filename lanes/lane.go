package lanes

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
)

// distrustPause is how long a lane waits when leadership is in doubt.
const distrustPause = 100 * time.Millisecond

// Wake tells a lane actor that its lane may have claimable work. The
// manager coalesces them: a lane has at most one Wake queued (see laneRef).
type Wake struct{}

// due is the lane's own timer firing: a backing-off head is due, or a
// pause after a store failure is over. Unlike Wake it is not counted, since
// the manager did not send it. gen names the timer (laneActor.timerGen): a
// timer cancelled after it fired has already queued its due, and that due
// stands for nothing.
type due struct{ gen uint64 }

// next makes a looping lane take its next row; one row per message, so that
// a stop is handled between rows and the delivery in hand always finishes.
type next struct{}

// idle reports to the manager that a lane found nothing to claim after
// having seen `wakes` Wake messages.
type idle struct {
	lane  string
	wakes int
	// from is the actor that reports: a lane's next actor counts its Wakes
	// from zero again, and an idle of its ended predecessor, handled late
	// (Terminated, a system message, overtakes it in the manager's
	// mailbox), could match that count and stop the new actor.
	from *actor.PID
	// held is set when the lane has just held its head for an operator:
	// until one acts, nothing in the lane can be claimed.
	held bool
	// floor is the lane's floor (laneActor.floor), kept by the manager
	// for the lane's next actor.
	floor int64
	// behindHead is set when rows are stored in the lane that it could not
	// claim (a Wake told it of a row newer than its floor, and its claim
	// found nothing): its head waits, backing off, held, or in flight under
	// a lease no actor of this node holds, and the lane, which did not try
	// it, does not know until when. Stopped without a word, it was not
	// parked, and its head waited for the next full rescan, 30 s, instead.
	behindHead bool
	// due is set when the lane's head is backing off until then (this
	// node's clock, never early): the manager may stop the lane and park
	// it, so that a lane waiting for a place under the destination's
	// laneCap takes its place meanwhile. Otherwise the lane times its own
	// backoff.
	due time.Time
}

// placeWanted asks a lane whose offer to yield its place was declined (no
// lane waited then) to offer again: a lane of its destination now waits.
type placeWanted struct{}

// LogValue: a lane's name carries its key, often a patient id.
func (i idle) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("wakes", i.wakes), slog.Bool("held", i.held))
}

// laneActor delivers one lane, one row at a time:
// claim (which reclaims a stranded head first) → send → complete, or retry
// with backoff (the row stays the head), or, once exhausted, dead or hold.
// It may hold a few rows claimed ahead of the one it sends (ahead); it sends
// none of them before the row before it is recorded.
type laneActor struct {
	lane   string
	dest   config.Outbound
	sender Sender
	// failing is the destination's, shared by its lanes: a failed send is
	// logged through it, not at every attempt of every lane.
	failing *outage
	env     *Env

	// queued is the manager's "a Wake is in this lane's mailbox" flag,
	// cleared as the Wake is taken: the manager sends another only after.
	queued *atomic.Bool
	// newest is the manager's bound on the lane's row ids (laneRef.newest).
	newest *atomic.Int64
	// claimable is the manager's "a rescan found this lane's head
	// claimable" flag (laneRef.claimable), taken with each Wake.
	claimable *atomic.Bool
	// outboundHeld is the manager's "an operator has held this lane's
	// outbound" flag (Manager.outboundHeld), shared by the outbound's
	// lanes: while it is set, the lane claims and sends nothing. Nil for a
	// lane started alone (tests).
	outboundHeld *atomic.Bool

	log     zerolog.Logger
	looping bool // a next is queued or a row is in hand
	wakes   int  // Wake messages seen, echoed in idle
	timer   scheduler.CancelFunc
	// timerGen numbers the timers wakeAfter sets; only the due of the
	// latest one is taken.
	timerGen uint64
	// head is the lane's next row, claimed by the write that recorded the
	// previous delivery (QueueAdvance) and sent at the next step.
	head *storage.QueueClaim
	// inHand is the row of the step under way, from its claim until the
	// step returns. A step ends with it recorded or given back; only a
	// panic leaves it set, and the stop that follows (Manager.HandleFailure)
	// gives it back, so that the lane's fresh actor sends it again at once
	// rather than once its lease ends (a minute, with the whole lane
	// waiting). Sent already or not, it is the lane's oldest unfinished
	// row: sent again, it is a duplicate of the row in flight, in order.
	inHand *storage.QueueClaim
	// ahead are the rows claimed right behind head, in id order, none sent
	// yet: up to the store's ClaimAhead, one claim statement for a run of
	// rows instead of one per row. Each row is still recorded done before
	// the next is sent, so a crash delivers again only the row in flight.
	// aheadUntil is the last moment one of them may still be taken (on this
	// node's clock, from before the claim; aheadFor): after it they are
	// given back rather than sent, so that every send ends, and is
	// recorded, inside its row's lease, as a freshly claimed head's does.
	// A send that outlived the lease would be re-pended by the sweep and
	// sent again. Every path that lets go of the run gives them back
	// (QueueGiveBack) first, or they would hold the lane until their lease
	// ends.
	ahead      []storage.QueueClaim
	aheadUntil time.Time
	// unsent are claims of rows never sent that a failed store call left
	// in flight (storeFailed, or a give back that failed): given back at the
	// lane's next step, or when it stops. Left to their lease, they came
	// back with an attempt they never made (and only at the next full
	// rescan), so a small max_attempts set them aside after fewer real
	// sends. A claim no longer current is skipped by the give back.
	unsent []storage.Claim
	// unrecorded is a row sent and delivered whose record failed (the
	// database away or full for a moment): recorded again under the claim
	// it was sent with at the lane's next step, before anything else.
	// Left in flight, it held the lane until its lease ran out (a minute by
	// default) and was then sent again.
	unrecorded *sentRow
	// unrecordedFailure is a row whose send failed and whose record of the
	// failure (QueueRetry, QueueHold, QueueDead) failed: recorded again,
	// as unrecorded is, under the claim it was sent with at the lane's next
	// step, before anything else, and then the lane does what the first
	// record would have had it do. Left in flight, it held the lane until
	// its lease ran out and was then sent again at once: without its
	// backoff, and, after its last allowed attempt, once beyond
	// max_attempts.
	unrecordedFailure *failedRow
	// unsure is set when a write that claims rows (QueueAdvance,
	// QueueClaimNext) failed in a way that leaves open whether it committed
	// (unknownOutcome): a reply lost after the commit, as when PostgreSQL
	// restarts or fails over, or a proxy drops the connection, during the
	// COMMIT. The rows it claimed, if it did, are in flight under this
	// node's lease and the lane knows nothing of them. Left so, they held
	// the lane: its next claim found its head in flight under a live lease
	// (its own) and nothing to claim, and the lane waited for that lease
	// (lease_ttl_seconds) to run out; the rows then came back with an
	// attempt never made. An unsure lane gives them back before its next
	// claim (releaseOwn).
	unsure bool
	// floor is the id of the last row this lane claimed, or its
	// predecessor's (Manager.floors): its head lookups start there
	// (storage.QueueClaimNextParams.From).
	floor int64
	// parked is set while the lane's head backs off after a failed send:
	// nothing in the lane can be claimed before the head's timer fires,
	// since a newly stored row queues behind the head. A Wake for a new row
	// is then not looked into: with a destination down, every message
	// stored used to cost a claim that found nothing. A Wake from a rescan
	// that found the head claimable (an operator's retry) still is; so is
	// one for a head given back after a send that wrote nothing, which the
	// give-back leaves claimable: a full listing (every 30 s) claims it
	// again before its timer, one claim and give-back a listing.
	parked bool
	// backoffUntil is when the head, backing off (parked), is due again:
	// what the lane's offer to yield its place says (yield).
	backoffUntil time.Time
	// held is set once the lane has held its head for an operator, and
	// cleared when it next has a row in hand. Every idle says it, not only
	// the first: the manager ignores an idle sent before the lane took a
	// Wake still in its mailbox (the Wake can come after the actor's first
	// step), and the lane's next idle, after a claim that found nothing,
	// must still say that its head is held, or the manager stops the lane
	// without parking it, and every row stored behind the head starts an
	// actor whose claim finds nothing.
	held bool
	// behindHead is set by a claim that found nothing while a row newer
	// than the floor is known to be stored, for the idle that follows
	// (idle.behindHead); cleared when it is sent or a claim finds a row.
	behindHead bool
	// afterPanic is set for a lane started afresh after its actor panicked
	// (Manager.terminated), until a claim finds a row: the lane knows no
	// bound on its rows (newest is unknown), and a claim that finds nothing
	// may be behind a head that waits, as the panicked actor may have left
	// it backing off. Each such claim says behindHead, not only the first:
	// the manager ignores the idle of a claim made while another Wake was
	// on its way (a listing wakes every running lane), and the next claim
	// must say it again, or the lane stops unparked.
	afterPanic bool
}

// Receive implements actor.Actor.
func (l *laneActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		// The lane name carries the lane key (often a patient id): never log it.
		l.log = l.env.Log.With().Str("destination", l.dest.Name).Logger()
		if l.failing == nil {
			l.failing = &outage{} // a lane started alone (tests)
		}
		l.wake(ctx)
	case Wake:
		// Cleared before looking for work: a row committed after this point
		// gets a fresh Wake, one committed before it is found by the claim.
		l.queued.Store(false)
		claimable := l.claimable.Swap(false)
		l.wakes++
		if l.parked && !claimable {
			// A new row, behind a head still backing off. The offer to
			// yield the lane's place, made as the head began to back off,
			// was ignored if this Wake was on its way then (an idle of an
			// older count): it is made again, counting this Wake, or lanes
			// that come to wait would wait out the whole backoff.
			l.yield(ctx, time.Until(l.backoffUntil))
			return
		}
		l.parked = false
		l.wake(ctx)
	case due:
		if msg.gen != l.timerGen || l.timer == nil {
			// A cancelled or replaced timer's: taken as the current one's,
			// a lane backing off claimed a head not yet due, found nothing,
			// dropped its real timer and went idle, and was stopped.
			return
		}
		l.timer = nil
		l.parked = false
		l.wake(ctx)
	case next:
		l.step(ctx)
	case placeWanted:
		l.yield(ctx, time.Until(l.backoffUntil))
	case *actor.Stopping:
		if l.timer != nil {
			l.timer()
		}
		l.giveBack()
	}
}

// giveBack gives back the rows claimed and not sent (the head and the rows
// ahead), and after a panic the row in hand, when the lane stops (a clean
// shutdown: the graph's context is still live), so that the next leader, or
// the lane's next actor, need not wait for their lease. On a demotion the
// context is gone and the call fails at once; promotion recovery re-pends
// the rows instead.
func (l *laneActor) giveBack() {
	// Each once: if it fails, the row stays in flight and is sent again
	// after its lease, which the operator should be able to tell from
	// the log.
	if l.unrecorded != nil && l.env.Ctx.Err() == nil {
		if err := l.recordAgain(); err != nil {
			storage.CountError(l.env.Ctx, "complete", err)
			l.unrecorded.log.Warn().Err(err).Msg("a delivery whose record had failed could not be recorded on stopping either: the message stays in flight and is delivered again once its lease expires (check the database)")
		}
	}
	if l.unrecordedFailure != nil && l.env.Ctx.Err() == nil {
		if _, err := l.recordFailureAgain(); err != nil {
			storage.CountError(l.env.Ctx, l.unrecordedFailure.op, err)
			l.unrecordedFailure.log.Warn().Err(err).Str("op", l.unrecordedFailure.op).Msg("a failed delivery whose record had failed could not be recorded on stopping either: the message stays in flight and is sent again once its lease expires (check the database)")
		}
	}
	held, head := l.inHand, l.head
	l.inHand, l.head = nil, nil
	if err := l.giveBackUnsent(held, head); err != nil && l.env.Ctx.Err() == nil {
		l.log.Warn().Err(err).Msg("could not give back messages claimed and not sent on stopping; they are delivered again once their lease expires")
	}
}

// giveBackUnsent gives back the rows claimed ahead, and before them each
// of cs that is not nil: rows claimed and never sent, pending again as if
// never claimed (their attempt taken back, so that they do not use up
// attempts they never made), with those a failed call left (unsent). It returns the store's
// error. On a failure they stay in flight under this node's lease and are
// kept in unsent, to be given back at the lane's next step; meanwhile its
// claims, which start at the head, wait for them, and order holds.
func (l *laneActor) giveBackUnsent(cs ...*storage.QueueClaim) error {
	return l.giveBackNoting("", "", cs...)
}

// giveBackNoting is giveBackUnsent, recording errorText and detail, if errorText
// is not empty, as the first claim's last error.
func (l *laneActor) giveBackNoting(errorText, detail string, cs ...*storage.QueueClaim) error {
	claims := make([]storage.Claim, 0, len(cs)+len(l.ahead)+len(l.unsent))
	for _, c := range cs {
		if c != nil {
			claims = append(claims, c.Claim())
		}
	}
	for _, a := range l.ahead {
		claims = append(claims, a.Claim())
	}
	claims = append(claims, l.unsent...)
	l.ahead, l.unsent = nil, nil
	if len(claims) == 0 {
		return nil
	}
	_, err := l.env.Store.QueueGiveBack(l.env.Ctx, storage.QueueGiveBackParams{Fence: l.env.Fence, Claims: claims, Lane: l.lane, Error: errorText, Detail: detail})
	if err != nil {
		l.unsent = claims // none was sent: tried again at the next step
	}
	return err
}

func (l *laneActor) wake(ctx actor.Context) {
	if l.looping {
		return
	}
	// A pending timer (a head backing off) stays: if this look finds the
	// head not yet due, the timer is what wakes the lane for it.
	l.looping = true
	ctx.Send(ctx.Self(), next{})
}

// wakeAfter schedules a Wake for when a backing-off head is due.
func (l *laneActor) wakeAfter(ctx actor.Context, d time.Duration) {
	l.looping = false
	if l.timer != nil {
		l.timer()
	}
	l.timerGen++
	l.timer = scheduler.NewTimerScheduler(ctx).SendOnce(d, ctx.Self(), due{gen: l.timerGen})
}

func (l *laneActor) step(ctx actor.Context) {
	if l.env.Ctx.Err() != nil { // demoted: touch nothing more
		l.looping = false
		return
	}
	if l.unrecorded != nil {
		// The lane's oldest unfinished row: recorded before the rows
		// behind it are given back or claimed.
		if err := l.recordAgain(); err != nil {
			l.storeFailed(ctx, "complete", err)
			return
		}
	}
	if f := l.unrecordedFailure; f != nil {
		// The lane's oldest unfinished row as well: nothing behind it is
		// claimed or sent before its failure is recorded.
		recorded, err := l.recordFailureAgain()
		if err != nil {
			l.storeFailed(ctx, f.op, err)
			return
		}
		if f.op != opDead {
			l.failureRecordedAgain(ctx, f, recorded)
			return
		}
		// Set aside: the lane moves on (the rows claimed behind it, unsent
		// since the failure, are given back below and claimed again).
	}
	if l.outboundHeld != nil && l.outboundHeld.Load() {
		// Held by an operator: the send in hand (if any) has finished and
		// is recorded; the rows claimed behind it go back, unsent, and
		// the lane stops. The manager starts none of the outbound's lanes
		// until it is released; then they resume from their heads.
		head := l.head
		l.head = nil
		if err := l.giveBackUnsent(head); err != nil {
			l.storeFailed(ctx, "give back", err)
			return
		}
		if l.unsure { // rows a lost answer may have left in flight, as before a claim
			if err := l.releaseOwn(); err != nil {
				l.storeFailed(ctx, "release own", err)
				return
			}
		}
		l.drained(ctx, false)
		return
	}
	c := l.head
	l.head = nil
	if c == nil && len(l.ahead) > 0 {
		if time.Now().Before(l.aheadUntil) {
			next := l.ahead[0]
			c, l.ahead = &next, l.ahead[1:]
		} else if err := l.giveBackUnsent(nil); err != nil {
			l.storeFailed(ctx, "give back", err)
			return
		}
	}
	if c == nil && len(l.unsent) > 0 {
		if err := l.giveBackUnsent(nil); err != nil {
			l.storeFailed(ctx, "give back", err)
			return
		}
	}
	if c == nil {
		if !l.env.Trust() {
			// Leadership is in doubt (a renewal is late): wait, the elector
			// either renews or fences, and a fence stops this graph.
			l.wakeAfter(ctx, distrustPause)
			return
		}
		if l.unsure {
			if err := l.releaseOwn(); err != nil {
				l.storeFailed(ctx, "release own", err)
				return
			}
		}
		claimed, err := l.env.Store.QueueClaimNext(l.env.Ctx, storage.QueueClaimNextParams{
			Fence: l.env.Fence, Lane: l.lane, From: l.floor, Owner: l.env.Owner, LeaseTTL: l.env.Config.Store.LeaseTTL(),
		})
		switch {
		case errors.Is(err, storage.ErrNoWork):
			l.storeWorked()
			n := l.newest.Load()
			l.behindHead = n != unknown && n > l.floor || l.afterPanic // see idle.behindHead
			l.drained(ctx, false)
			return
		case err != nil:
			l.unsure = l.unsure || l.unknownOutcome(err)
			l.storeFailed(ctx, "claim", err)
			return
		}
		l.storeWorked()
		// A word kept since a claim that found nothing (drained sends none
		// while a timer runs) is stale once a row is claimed.
		l.behindHead, l.afterPanic = false, false
		c = &claimed
	}
	l.inHand = c
	l.deliver(ctx, c)
	l.inHand = nil // not deferred: after a panic, the stop gives it back
}

// distrusted gives back c, which was not sent because leadership was in
// doubt right before it would have left (a process frozen past its trust
// window, SIGSTOP or a VM pause, must not deliver on waking): it stays the
// lane's head, with the rows claimed behind it, and the lane looks again
// shortly (the elector either renews or fences, and a fence stops this
// graph).
func (l *laneActor) distrusted(ctx actor.Context, log zerolog.Logger, c *storage.QueueClaim) {
	if err := l.giveBackUnsent(c); err != nil {
		l.storeFailed(ctx, "give back", err)
		return
	}
	log.Warn().Msg("leadership in doubt right before a send: the message was not sent and stays the lane's head")
	l.wakeAfter(ctx, distrustPause)
}

// deliver sends the lane's row c and records the outcome: delivered (with
// the next row claimed), retried later, held or set aside.
func (l *laneActor) deliver(ctx actor.Context, c *storage.QueueClaim) {
	l.floor = c.Row.ID
	l.held = false

	log := l.log.With().Int64("queue_id", c.Row.ID).Int64("message_id", c.Row.MessageID).
		Str("control_id", c.ControlID).Int64("attempt", c.Row.Attempts).Logger()
	claim := c.Claim()
	var err error
	if !l.env.Trust() {
		l.distrusted(ctx, log, c)
		return
	}
	start := time.Now()
	dctx, cancel := context.WithTimeout(l.env.Ctx, l.dest.Timeout())
	// The sender asks the trust window again at the last moment (MayWrite):
	// a send waits for a free connection of its destination, shared by
	// its lanes, and a process frozen then woke past its window and wrote
	// a message the next leader had delivered, with the rows behind it,
	// seconds before (the chaos test saw it).
	sendErr := l.sender.Send(dctx, Outgoing{QueueID: c.Row.ID, ControlID: c.ControlID, Payload: c.Payload, MayWrite: l.env.Trust})
	cancel()
	elapsed := time.Since(start)

	if sendErr != nil && l.env.Ctx.Err() != nil {
		// The term ended during the send (demotion or fence), which cancels
		// it: abandoned, not a failure of the destination, so it is not
		// counted in mf_deliveries_total (nor is its attempt recorded: every
		// write of this term now fails). The row stays in flight, and the
		// next leader delivers it again.
		l.abandoned(log, sendErr)
		return
	}
	if errors.Is(sendErr, ErrDistrusted) {
		l.distrusted(ctx, log, c)
		return
	}
	if sendErr == nil {
		observeDelivery(l.dest.Name, "delivered", elapsed)
		l.advance(ctx, log, claim, elapsed)
		return
	}

	var de *DeliveryError
	errors.As(sendErr, &de) // nil for an error that is no DeliveryError
	if errors.Is(sendErr, errNotWritten) {
		// Nothing was written (no free connection in time, or the
		// receiver unreachable: a dial that failed, or the next not due):
		// no attempt at the destination. The row goes back as never
		// claimed, its attempt taken back, so that lanes waiting for a
		// destination's shared connections or for it to come back neither
		// use up max_attempts (and set messages aside unsent) nor back off
		// longer and longer; the lane tries again after the destination's
		// base delay, or when the sender says its next dial is due. Why is
		// kept as the row's last error, for GET /lanes.
		reason, detail := recorded(sendErr)
		if err := l.giveBackNoting(reason, detail, c); err != nil {
			l.storeFailed(ctx, "give back", err)
			return
		}
		wait := l.dest.RetryBase()
		if de != nil {
			wait = max(wait, de.RetryAfter)
		}
		observeDelivery(l.dest.Name, "retry", elapsed)
		l.sendFailed(log, sendErr, wait,
			"the message was not sent (nothing was written: no free connection to the destination in time, or the destination unreachable) and stays the lane's head; if no free connection is the cause and it repeats, raise the destination's connections or timeout_seconds")
		l.wakeAfter(ctx, wait)
		// Parked as after a failed send: a Wake for a newly stored row,
		// which queues behind the head, is not looked into before the
		// timer. Unparked, every message stored while the destination was
		// unreachable cost a claim and a give-back (two commits) that
		// wrote nothing.
		l.parked = true
		l.yield(ctx, wait)
		return
	}
	permanent := de != nil && de.Permanent
	// Counted since an operator's last retry, which gives a fresh set:
	// counted in all, a retried head was held again after one failure.
	tries := c.AttemptsSinceRetry()
	exhausted := permanent || (l.dest.MaxAttempts > 0 && tries >= int64(l.dest.MaxAttempts))
	reason, detail := recorded(sendErr)
	if !exhausted || l.dest.OnExhausted != config.ExhaustedDead {
		// The head stays the lane's head (retried or held): the rows
		// claimed behind it go back first. If they cannot, the failed send
		// is still recorded: they stay in flight behind it until their
		// lease ends, and come back after it, in order.
		if err := l.giveBackUnsent(nil); err != nil && l.env.Ctx.Err() == nil {
			storage.CountError(l.env.Ctx, "give back", err)
			log.Warn().Err(err).Msg("could not give back the messages claimed behind a failed one; the lane tries again at its next step, and they are delivered after it")
		}
	}
	if !exhausted {
		delay := Backoff(tries, l.dest.RetryBase(), l.dest.RetryMax())
		if de != nil && de.RetryAfter > delay {
			// The destination said when it can take the message again;
			// sooner is only refused again.
			delay = max(delay, min(de.RetryAfter, l.dest.RetryMax()))
		}
		f := &failedRow{claim: claim, log: log, op: opRetry, reason: reason, detail: detail, delay: delay, first: time.Now()}
		err = l.recordFailure(f)
		l.failureUnrecorded(f, err)
		observeDelivery(l.dest.Name, "retry", elapsed)
		l.sendFailed(log, sendErr, delay, "delivery failed; the lane waits and retries this message (order is kept)")
		if l.finished(ctx, log, opRetry, err) {
			l.wakeAfter(ctx, delay)
			l.parked = err == nil
			l.yield(ctx, delay)
		}
		return
	}
	if l.dest.OnExhausted == config.ExhaustedDead {
		f := &failedRow{claim: claim, log: log, op: opDead, reason: reason, detail: detail}
		err = l.recordFailure(f)
		l.failureUnrecorded(f, err)
		if errors.Is(err, storage.ErrClaimLost) {
			// The row is pending again and is delivered again first: the
			// rows behind it may not be sent before it (FIFO), so they go back.
			if gerr := l.giveBackUnsent(nil); gerr != nil {
				l.storeFailed(ctx, "give back", gerr)
				return
			}
		}
		observeDelivery(l.dest.Name, "dead", elapsed)
		log.Error().Err(forLog(sendErr, l.env.logPayloads())).Bool("rejected", permanent).Msg("delivery given up: message set aside as dead, the lane moves on; inspect it with GET /messages/{id}")
		l.finished(ctx, log, opDead, err)
		return
	}
	f := &failedRow{claim: claim, log: log, op: opHold, reason: reason, detail: detail}
	err = l.recordFailure(f)
	l.failureUnrecorded(f, err)
	observeDelivery(l.dest.Name, "blocked", elapsed)
	log.Error().Err(forLog(sendErr, l.env.logPayloads())).Bool("rejected", permanent).Msg("delivery given up: the lane is blocked until an operator retries or skips this message (POST /queue/{id}/retry or /skip)")
	if l.finished(ctx, log, opHold, err) {
		l.drained(ctx, err == nil)
	}
}

// advance records a delivery and, in the same write, claims the lane's next
// row (QueueAdvance), which the next step sends. While leadership is in
// doubt it only records the delivery: nothing new is claimed then.
//
// Nor does it look for a next row when the row delivered is the newest the
// manager knows of in this lane: by FIFO every lower id is finished, so there
// is none, and a row stored since comes with a Wake. When traffic is light
// that is every delivery, and the look found nothing each time: a claim
// statement for nothing in the write that records the delivery.
//
// With rows claimed ahead in hand it only records the delivery: the next
// row is already claimed. If that claim turns out lost (the lease ran out),
// the rows ahead are given back, since the lost row is delivered again
// first.
func (l *laneActor) advance(ctx actor.Context, log zerolog.Logger, claim storage.Claim, took time.Duration) {
	called := time.Now()
	newest := len(l.ahead) == 0 && l.newest.Load() <= claim.ID
	// Held since the send began: the row is recorded alone, no next one
	// claimed with it (the claim would refuse it anyway; see step).
	held := l.outboundHeld != nil && l.outboundHeld.Load()
	if newest || held || len(l.ahead) > 0 || !l.env.Trust() {
		err := l.env.Store.QueueComplete(l.env.Ctx, storage.QueueCompleteParams{Fence: l.env.Fence, Claim: claim, Lane: l.lane})
		if err == nil {
			l.delivered(log, took, called)
			if newest {
				l.drained(ctx, false) // a row stored since comes with a Wake
				return
			}
		}
		if errors.Is(err, storage.ErrClaimLost) || (err == nil && !l.env.Trust()) {
			if gerr := l.giveBackUnsent(nil); gerr != nil {
				l.storeFailed(ctx, "give back", gerr)
				return
			}
		}
		l.recordFailed(log, claim, took, err)
		l.finished(ctx, log, "complete", err)
		return
	}
	window := l.aheadFor()
	a, err := l.env.Store.QueueAdvance(l.env.Ctx, storage.QueueAdvanceParams{
		Fence: l.env.Fence, Claim: claim, Lane: l.lane, Owner: l.env.Owner, LeaseTTL: l.env.Config.Store.LeaseTTL(), Ahead: l.claimAhead(window, took),
	})
	if err != nil {
		l.unsure = l.unsure || l.unknownOutcome(err)
		l.recordFailed(log, claim, took, err)
		l.storeFailed(ctx, "advance", err)
		return
	}
	l.storeWorked()
	l.ahead, l.aheadUntil = a.Ahead, called.Add(window)
	if a.Completed {
		l.delivered(log, took, called)
	} else {
		log.Warn().Str("op", "advance").Msg(claimLostMsg)
	}
	if a.Next == nil {
		l.drained(ctx, false)
		return
	}
	l.head = a.Next
	ctx.Send(ctx.Self(), next{})
}

// sentRow is a delivery made and not yet recorded (laneActor.unrecorded).
type sentRow struct {
	claim storage.Claim
	log   zerolog.Logger
	took  time.Duration
}

// recordFailed keeps a delivery whose record failed, unless the failure
// says the record cannot be made: the claim is lost (the row is sent
// again), or the term is over (the next leader sends it again).
func (l *laneActor) recordFailed(log zerolog.Logger, claim storage.Claim, took time.Duration, err error) {
	if l.recordable(err) {
		l.unrecorded = &sentRow{claim: claim, log: log, took: took}
	}
}

// recordable reports whether a record that failed with err is to be made
// again under its claim: not when the claim is lost (the row is sent
// again), nor at the term's end (the next leader's recovery re-pends it).
func (l *laneActor) recordable(err error) bool {
	return err != nil && !errors.Is(err, storage.ErrClaimLost) && !errors.Is(err, storage.ErrFenced) && l.env.Ctx.Err() == nil
}

// recordAgain records l.unrecorded under the claim it was sent with. A
// claim no longer current is not an error: the first record may have been
// made after all (a reply lost after the commit), or the lease ran out and
// the row was re-pended, and it is sent again.
func (l *laneActor) recordAgain() error {
	u := l.unrecorded
	called := time.Now()
	err := l.env.Store.QueueComplete(l.env.Ctx, storage.QueueCompleteParams{Fence: l.env.Fence, Claim: u.claim, Lane: l.lane})
	switch {
	case err == nil:
		l.delivered(u.log, u.took, called)
	case errors.Is(err, storage.ErrClaimLost), errors.Is(err, storage.ErrNotFound):
		u.log.Warn().Msg("a delivery whose record had failed could not be recorded again: its claim is no longer current (either the first record was made after all, or the row lease expired and the message will be delivered again)")
	default:
		return err
	}
	l.unrecorded = nil
	l.storeWorked()
	return nil
}

// The records of a failed send, which are also finished's ops.
const (
	opRetry = "retry" // QueueRetry: due again after a backoff
	opHold  = "hold"  // QueueHold: held for an operator (on_exhausted = "block")
	opDead  = "dead"  // QueueDead: set aside (on_exhausted = "dead")
)

// failedRow is a failed send and the record it calls for
// (laneActor.unrecordedFailure while that record is not made).
type failedRow struct {
	claim          storage.Claim
	log            zerolog.Logger
	op             string // opRetry, opHold or opDead
	reason, detail string
	// delay is a retry's backoff, counted from first, the first attempt to
	// record it: a record made again is due no later than the first would
	// have been. wait is what the last attempt asked for, what was left of
	// delay then; the lane's timer, set after the record, waits as long, so
	// that it fires once the row is due on the store's clock. (What is left
	// after the record, a few milliseconds less, had the lane claim before
	// the row was due, find nothing and go idle.)
	delay, wait time.Duration
	first       time.Time
}

// recordFailure records the failed send f under the claim it was sent with.
func (l *laneActor) recordFailure(f *failedRow) error {
	switch f.op {
	case opRetry:
		f.wait = max(0, f.delay-time.Since(f.first))
		return l.env.Store.QueueRetry(l.env.Ctx, storage.QueueRetryParams{Fence: l.env.Fence, Claim: f.claim, Delay: f.wait, Error: f.reason, Detail: f.detail})
	case opDead:
		return l.env.Store.QueueDead(l.env.Ctx, storage.QueueDeadParams{Fence: l.env.Fence, Claim: f.claim, Error: f.reason, Detail: f.detail})
	default:
		return l.env.Store.QueueHold(l.env.Ctx, storage.QueueHoldParams{Fence: l.env.Fence, Claim: f.claim, Error: f.reason, Detail: f.detail})
	}
}

// failureUnrecorded keeps a failed send whose record failed with err, as
// recordFailed keeps a delivery.
func (l *laneActor) failureUnrecorded(f *failedRow, err error) {
	if l.recordable(err) {
		l.unrecordedFailure = f
	}
}

// recordFailureAgain records l.unrecordedFailure under the claim it was
// sent with, and reports whether it did. A claim no longer current is not
// an error, as for recordAgain: the first record may have been made after
// all, or the lease ran out and the row was re-pended (it is sent again).
func (l *laneActor) recordFailureAgain() (bool, error) {
	f := l.unrecordedFailure
	err := l.recordFailure(f)
	switch {
	case err == nil:
		f.log.Debug().Str("op", f.op).Dur("late", time.Since(f.first)).Msg("failed delivery recorded")
	case errors.Is(err, storage.ErrClaimLost), errors.Is(err, storage.ErrNotFound):
		f.log.Warn().Str("op", f.op).Msg("a failed delivery whose record had failed could not be recorded again: its claim is no longer current (either the first record was made after all, or the row lease expired and the message will be delivered again)")
	default:
		return false, err
	}
	l.unrecordedFailure = nil
	l.storeWorked()
	return err == nil, nil
}

// failureRecordedAgain goes on, from a step, as the failed send f's first
// record would have had the lane go on had it worked: a retry waits what is
// left of its backoff, parked; a held head drains the lane. The rows
// claimed behind the head, unsent since, go back first; if they cannot,
// they wait in flight behind it, as after deliver's give back.
func (l *laneActor) failureRecordedAgain(ctx actor.Context, f *failedRow, recorded bool) {
	if err := l.giveBackUnsent(nil); err != nil && l.env.Ctx.Err() == nil {
		storage.CountError(l.env.Ctx, "give back", err)
		f.log.Warn().Err(err).Msg("could not give back the messages claimed behind a failed one; the lane tries again at its next step, and they are delivered after it")
	}
	if f.op == opRetry {
		l.wakeAfter(ctx, f.wait)
		l.parked = recorded
		l.yield(ctx, f.wait)
		return
	}
	l.drained(ctx, recorded)
}

// unknownOutcome reports whether err, the failure of a write that claims
// rows, leaves open whether the write committed: anything but a fence, a
// claim lost or nothing to claim (answers the database gave), or the term's
// end (every write of the term fails from then on, and the next leader's
// promotion recovery re-pends what this one held).
func (l *laneActor) unknownOutcome(err error) bool {
	return !errors.Is(err, storage.ErrFenced) && !errors.Is(err, storage.ErrClaimLost) &&
		!errors.Is(err, storage.ErrNoWork) && l.env.Ctx.Err() == nil
}

// releaseOwn gives back every row of the lane in flight under this node's
// lease (QueueReleaseOwn), for an unsure lane that holds none: no head, no
// rows ahead, none unsent, nothing unrecorded, none in hand (step calls
// it right before a claim). Why none of those rows was sent: a lane has one
// actor, on the one primary, and it alone claims the lane's rows under this
// owner (the process's run: no other process, nor a later run of this one,
// leases under it), and it holds every row it claimed and heard of until
// that row is recorded or given back. A row of the lane in flight under
// this owner that the actor does not hold was therefore claimed by a write
// whose reply it never got, and it never sent it. (The lane's previous
// actor, if any: stopped idle, it held no row it had sent; stopped after a
// panic, it gave back its row in hand, sent or not, and if that failed this
// gives it back instead: sent again, in order, as it meant.) Given back in
// place, its attempt taken back, each is claimed again by the lane's next
// claim, in order, at once rather than once its lease runs out. (One row
// of the lane may have been sent: a delivery whose record failed, and
// failed again at its actor's stop, stays in flight under this owner; a
// later actor of the lane that becomes unsure gives it back too, and it
// is sent again, in order, as at least once allows, its attempt uncounted.
// A write
// whose connection dropped may still commit on the server after this runs;
// the rows it claims then wait for their lease, as all did before.)
func (l *laneActor) releaseOwn() error {
	n, err := l.env.Store.QueueReleaseOwn(l.env.Ctx, storage.QueueReleaseOwnParams{Fence: l.env.Fence, Lane: l.lane, Owner: l.env.Owner})
	if err != nil {
		return err
	}
	l.unsure = false
	if n > 0 {
		l.log.Info().Int64("rows", n).
			Msg("gave back messages that a claim whose answer was lost (the database connection dropped during the commit) had left in flight, never sent; they are delivered now, in order, not once their lease expires")
	}
	return nil
}

// delivered logs a delivery recorded, and the end of the destination's
// failures if they were logged.
func (l *laneActor) delivered(log zerolog.Logger, took time.Duration, called time.Time) {
	log.Debug().Dur("took", took).Time("call_started", called).Msg("delivered")
	if n := l.failing.over(); n > 0 {
		l.log.Info().Int("failures", n).Msg("deliveries to the destination work again")
	}
}

// sendFailed logs a send that failed and is tried again after retryIn: at
// DEBUG (msg), and through the destination's outage, so that a destination
// down is a WARN at most once a minute (when its failures start, unless its
// last WARN is less than a minute old, and while they last), with how many
// so far, not one at each attempt of each of its lanes.
func (l *laneActor) sendFailed(log zerolog.Logger, err error, retryIn time.Duration, msg string) {
	err = forLog(err, l.env.logPayloads())
	log.Debug().Err(err).Dur("retry_in", retryIn).Msg(msg)
	if report, n := l.failing.failed(time.Now()); report {
		log.Warn().Err(err).Dur("retry_in", retryIn).Int("failures", n).
			Msg("deliveries to the destination fail, logged at most once a minute while it lasts, with the failures since the last delivery " +
				"(GET /lanes shows each lane's last error); this one: " + msg)
	}
}

// aheadFor is how long after a claim a row claimed ahead may still be taken:
// half of what its lease leaves beyond the destination's timeout. A row
// taken then has at least the timeout and that much more left on its lease,
// so its send ends, and is recorded, while the lease holds; a head claimed
// afresh has the whole lease. (The lease counts on the database's clock
// from the claim, which comes after the moment this one counts from.)
func (l *laneActor) aheadFor() time.Duration {
	return (l.env.Config.Store.LeaseTTL() - l.dest.Timeout()) / 2
}

// claimAhead is how many rows to claim behind the next head: the store's
// run, cut to as many as fit in the window in which they may be taken, at
// the pace of the send just made (took). A destination slower than the
// window gets none: a run would only be claimed to be given back.
func (l *laneActor) claimAhead(window, took time.Duration) int {
	n := l.env.Store.ClaimAhead()
	if took > 0 {
		n = int(min(int64(n), int64(window/took)))
	}
	return max(n, 0)
}

// drained ends the loop: the lane has nothing it can claim now, and tells
// the manager so (which stops it unless a Wake is on its way). held says
// that the lane has just held its head for an operator.
func (l *laneActor) drained(ctx actor.Context, held bool) {
	l.looping = false
	l.held = l.held || held
	if l.timer != nil {
		// A head backing off, or a pause, wakes the lane when it ends. Going
		// idle now would stop the lane, and the head would wait for the
		// manager's next rescan instead of its own delay (a Wake for a
		// newly stored row, arriving during the backoff, did just that).
		return
	}
	ctx.Send(ctx.Parent(), idle{lane: l.lane, wakes: l.wakes, from: ctx.Self(), held: l.held, behindHead: l.behindHead, floor: l.floor})
	l.behindHead = false
}

// yieldAfter is the shortest backoff for which a lane offers its place
// under the destination's laneCap (idle.due): the manager wakes a parked
// lane at its rescans, every RescanInterval, so a shorter one is timed by
// the lane itself.
const yieldAfter = RescanInterval

// yield tells the manager that the lane's head, just recorded for a retry
// (parked), backs off for d: if other lanes of the destination wait for a
// place, the manager stops this one and parks it until then. Nothing of the
// lane is in flight then (the rows claimed behind the head went back
// before the retry was recorded).
func (l *laneActor) yield(ctx actor.Context, d time.Duration) {
	l.backoffUntil = time.Now().Add(d) // also when it offers nothing: a later placeWanted reads it
	if !l.parked || d < yieldAfter || len(l.ahead) > 0 || len(l.unsent) > 0 {
		return
	}
	ctx.Send(ctx.Parent(), idle{lane: l.lane, wakes: l.wakes, from: ctx.Self(), held: l.held, floor: l.floor, due: l.backoffUntil})
}

// claimLostMsg is logged when a delivery's claim was no longer current when
// it was recorded: the row was reclaimed and will be delivered again.
const claimLostMsg = "row lease expired before the delivery was recorded; the message will be delivered again"

// finished handles the store's answer to the write that ends a delivery and
// reports whether the lane should carry on with its own scheduling (true) or
// has already been rescheduled.
func (l *laneActor) finished(ctx actor.Context, log zerolog.Logger, op string, err error) bool {
	switch {
	case err == nil:
		l.storeWorked()
	case errors.Is(err, storage.ErrClaimLost):
		// The lease ran out and the row was reclaimed: it will be delivered
		// again (at least once). Nothing to undo here.
		log.Warn().Str("op", op).Msg(claimLostMsg)
	default:
		l.storeFailed(ctx, op, err)
		return false
	}
	if op == "complete" || op == opDead {
		ctx.Send(ctx.Self(), next{})
	}
	return true
}

// storeFailed handles a failed store call: a fence means this node is no
// longer the leader; anything else is retried after a pause.
func (l *laneActor) storeFailed(ctx actor.Context, op string, err error) {
	// Rows claimed ahead are not sent after a failure (the row before them
	// may not be recorded); they stay in flight, and the lane's next step
	// gives them back (unsent). Its claims start at the lane's head, so
	// they are delivered after whatever came before them, in order.
	for _, a := range l.ahead {
		l.unsent = append(l.unsent, a.Claim())
	}
	l.ahead = nil
	storage.CountError(l.env.Ctx, op, err)
	if errors.Is(err, storage.ErrFenced) || l.env.Ctx.Err() != nil {
		l.looping = false
		l.env.OnFenced(op, err)
		return
	}
	if log, n := l.env.storeFailures.Failed(time.Now()); log {
		l.log.Error().Err(err).Str("op", op).Int("failures", n).
			Msg("store call failed; the lane retries in 1s, as does every lane whose call fails (the failures of all lanes are logged once a minute while they last; check the database)")
	}
	l.wakeAfter(ctx, time.Second)
}

// storeWorked ends the lanes' store failures, if any were counted, with a
// line that says how many there were.
func (l *laneActor) storeWorked() {
	if n := l.env.storeFailures.Over(); n > 0 {
		l.log.Info().Int("failures", n).Msg("the lanes' store calls work again")
	}
}

// abandoned ends the lane's loop on a send the end of the term cancelled:
// the graph is being stopped. Rows claimed ahead stay in flight too.
func (l *laneActor) abandoned(log zerolog.Logger, sendErr error) {
	for _, a := range l.ahead {
		l.unsent = append(l.unsent, a.Claim())
	}
	l.ahead = nil
	l.looping = false
	log.Info().Err(forLog(sendErr, l.env.logPayloads())).
		Msg("send abandoned: this node stopped leading; the next leader sends the message again")
	l.env.OnFenced("send", context.Cause(l.env.Ctx))
}

// Backoff is the delay before attempt n+1 after n failed attempts:
// base·2^(n-1), capped at max, with ±20% jitter so that lanes failing
// together do not retry in lockstep.
func Backoff(n int64, base, max time.Duration) time.Duration {
	d := base
	for i := int64(1); i < n && d < max; i++ {
		d = doubled(d)
	}
	if d > max {
		d = max
	}
	// The jitter spreads the lanes' retries; the cap stays the cap
	// (retry_max_seconds is the longest wait an operator is promised). In
	// float: 1.2 times a wait near the longest time.Duration is out of its
	// range, and the conversion would come out negative (due at once).
	j := float64(d) * (0.8 + 0.4*rand.Float64())
	if j >= float64(max) {
		return max
	}
	return time.Duration(j)
}

// doubled is 2d, or the longest time.Duration where 2d is longer: a cap of
// retry_max_seconds past half of it (about 146 years) is allowed.
func doubled(d time.Duration) time.Duration {
	if d > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return 2 * d
}

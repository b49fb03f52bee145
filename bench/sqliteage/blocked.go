package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// blocked writes what a node leaves behind whose destination ehr has been
// blocked since before the cut-off (retention days ago): the blocked
// messages older than the cut-off, each with its pending ehr row alone (its
// lab row, done, was purged); then traffic at rate messages/s from hours
// before the cut-off to now, each message to lab (done 30 ms after) and
// every second one to ehr too (pending), one in ten never queued
// (unrouted). The first purge has the hours before the cut-off to delete,
// and the next hourly one the hour after it (hourly's second round).
func blocked(path string, backlog int, rate float64, retention time.Duration, hours float64, size int) error {
	ctx := context.Background()
	db, err := migratedRawDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	now := time.Now()
	cut := now.Add(-retention)
	traffic := now.Sub(cut.Add(-time.Duration(hours * float64(time.Hour))))
	n := int(traffic.Seconds() * rate)
	step := float64(traffic.Milliseconds()) / float64(n)
	// The backlog comes in the day before the traffic, at its own rate.
	from := now.Add(-traffic).Add(-24 * time.Hour).UnixMilli()
	bstep := float64(24*time.Hour/time.Millisecond) / float64(backlog)
	rng := rand.New(rand.NewPCG(5, 6))
	began := time.Now()
	var id int64
	write := func(count int, at func(i int) int64, kind func(i int) (routed, lab, ehr bool)) error {
		for i := 0; i < count; i += 10_000 {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			msg, _ := tx.PrepareContext(ctx, "INSERT INTO mf_messages (inbound, received_at, control_id, message_type, payload, status) VALUES ('adt-in', ?1, ?2, 'ADT^A01', ?3, ?4) RETURNING id")
			q, _ := tx.PrepareContext(ctx, "INSERT INTO mf_queue (message_id, destination, lane, status, attempts, next_attempt_at, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)")
			for j := i; j < min(i+10_000, count); j++ {
				t := at(j)
				id++
				routed, lab, ehr := kind(j)
				status := storage.MessageRouted
				if !routed {
					status = storage.MessageUnrouted
				}
				var mid int64
				if err := msg.QueryRowContext(ctx, t, fmt.Sprintf("C%d", id), hl7(rng, id, size), status).Scan(&mid); err != nil {
					return err
				}
				patient := rng.IntN(5000)
				if lab {
					if _, err := q.ExecContext(ctx, mid, "lab", fmt.Sprintf("lab/%d", patient), "done", 1, t, t+30); err != nil {
						return err
					}
				}
				if ehr {
					if _, err := q.ExecContext(ctx, mid, "ehr", fmt.Sprintf("ehr/%d", patient), "pending", 0, t, t); err != nil {
						return err
					}
				}
			}
			msg.Close()
			q.Close()
			if err := tx.Commit(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := write(backlog, func(i int) int64 { return from + int64(float64(i)*bstep) },
		func(int) (bool, bool, bool) { return true, false, true }); err != nil {
		return err
	}
	fmt.Printf("backlog written: %d messages, %v\n", backlog, time.Since(began).Round(time.Second))
	start := now.Add(-traffic).UnixMilli()
	if err := write(n, func(i int) int64 { return start + int64(float64(i)*step) },
		func(i int) (bool, bool, bool) {
			if i%10 == 9 {
				return false, false, false
			}
			return true, true, i%2 == 0
		}); err != nil {
		return err
	}
	fmt.Printf("traffic written: %d messages at %.1f/s from %.1f h before the cut-off, %v\n", n, rate, hours, time.Since(began).Round(time.Second))
	_, err = db.ExecContext(ctx, "PRAGMA journal_mode = WAL")
	return err
}

// hourly runs the sweeper's purge calls (with its pause, three times a
// call's time) until one deletes less than limit of both tables and says
// no More, at retention and then an hour later (retention less an hour),
// beside a load of rate ingests a second, and prints each call's time and
// rows and the ACK waits meanwhile.
func hourly(path string, retention time.Duration, limit, rate, size int) error {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
	if err != nil {
		return err
	}
	defer s.Close()
	var blockedPast, msgs, rows int64
	s.DB().QueryRowContext(ctx, "SELECT (SELECT count(*) FROM mf_messages), (SELECT count(*) FROM mf_queue), (SELECT count(*) FROM mf_queue WHERE status = 'pending' AND created_at < ?1)",
		time.Now().Add(-retention).UnixMilli()).Scan(&msgs, &rows, &blockedPast)
	fmt.Printf("store: %d messages, %d queue rows, %d pending rows past the cut-off\n", msgs, rows, blockedPast)
	l := startLoad(s, rate, size)
	time.Sleep(5 * time.Second)
	fmt.Printf("baseline 5 s at %d/s: %s\n", rate, l.Window())
	for round, older := range []time.Duration{retention, retention - time.Hour} {
		var all, slowest time.Duration
		var total storage.PurgeResult
		calls := 0
		for {
			calls++
			t := time.Now()
			r, err := s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: older, Limit: limit})
			if err != nil {
				l.end()
				return err
			}
			took := time.Since(t)
			all += took
			slowest = max(slowest, took)
			total.QueueRows += r.QueueRows
			total.Messages += r.Messages
			more := ""
			if r.More {
				more = " (more to walk)"
			}
			// The ingests that waited for the call's last transaction
			// are committed after it: counted with the pause's.
			time.Sleep(3 * took) // the sweeper's purgePause
			fmt.Printf("round %d call %d: %d queue rows, %d messages%s in %v; ingests done during it and its pause: %s\n",
				round+1, calls, r.QueueRows, r.Messages, more, took.Round(time.Millisecond), l.Window())
			if r.QueueRows < int64(limit) && r.Messages < int64(limit) && !r.More {
				break
			}
		}
		fmt.Printf("round %d: %d calls, %d queue rows, %d messages in %v of calls (slowest %v)\n",
			round+1, calls, total.QueueRows, total.Messages, all.Round(time.Millisecond), slowest.Round(time.Millisecond))
		time.Sleep(5 * time.Second)
		fmt.Printf("5 s without a purge: %s\n", l.Window())
	}
	l.end()
	return nil
}

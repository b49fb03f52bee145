package storage

import (
	"context"
	"time"

	"github.com/rs/zerolog"
)

// MigrateRetry runs a clustered dialect's migrations (once: one attempt, in
// one transaction) until they succeed, fail otherwise than by conflict, or
// have run attempts times, pausing between attempts. conflict says which
// errors are another session's locks met (a lock timeout or a deadlock: the
// attempt rolled back); look says where an operator finds what holds them,
// in the WARN each retry logs. It returns the last attempt's error, or the
// context's if it ends during a pause; the dialect explains a conflict that
// outlasted the attempts.
func MigrateRetry(ctx context.Context, log zerolog.Logger, attempts int, pause time.Duration, look string, conflict func(error) bool, once func() error) error {
	for attempt := 1; ; attempt++ {
		err := once()
		if !conflict(err) || attempt == attempts {
			return err
		}
		log.Warn().Err(err).Int("attempt", attempt).Int("attempts", attempts).
			Msg("the schema migrations met a lock of another session (a write of a node still running, or a long transaction) and were rolled back; trying again in " + pause.String() + " (if this repeats, look in " + look + ")")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

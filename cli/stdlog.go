package cli

import (
	stdlog "log"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
)

// routeStdlibLog sends what the standard library's log package prints into
// the node's log, one WARN line each, and returns what undoes it. net/http's
// HTTP client prints there, as plain text on stderr, in the middle of the
// JSON log: and its line about bytes a server sent on an idle connection,
// not in answer to a request, quotes those bytes, which an HTTP destination
// that echoes the message after its answer fills with patient fields. That
// line keeps only how many bytes came, unless payloads says so (config
// log_payloads, read at each line: a reload may turn it off). (The API
// server's own lines go through api's serverLog.)
func routeStdlibLog(log zerolog.Logger, payloads func() bool) (restore func()) {
	w, flags, prefix := stdlog.Writer(), stdlog.Flags(), stdlog.Prefix()
	stdlog.SetOutput(stdlibLog{log: log, payloads: payloads})
	stdlog.SetFlags(0)
	stdlog.SetPrefix("")
	return func() {
		stdlog.SetOutput(w)
		stdlog.SetFlags(flags)
		stdlog.SetPrefix(prefix)
	}
}

type stdlibLog struct {
	log      zerolog.Logger
	payloads func() bool
}

// unsolicited starts net/http's line about bytes on an idle connection
// (Transport's readLoopPeekFailLocked): the bytes follow, quoted (%q), then
// "; err=" and the read's error.
const unsolicited = "Unsolicited response received on idle HTTP channel starting with "

func (l stdlibLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	rest, ok := strings.CutPrefix(msg, unsolicited)
	if !ok {
		l.log.Warn().Str("component", "stdlib").Msg(msg)
		return len(p), nil
	}
	ev := l.log.Warn().Str("component", "net/http")
	if l.payloads() {
		ev.Msg(msg)
		return len(p), nil
	}
	quoted, readErr := rest, ""
	if i := strings.LastIndex(rest, "; err="); i >= 0 {
		quoted, readErr = rest[:i], rest[i+len("; err="):]
	}
	if b, err := strconv.Unquote(quoted); err == nil {
		ev = ev.Int("bytes", len(b))
	}
	if readErr != "" && readErr != "<nil>" {
		ev = ev.Str("error", readErr)
	}
	ev.Msg("an HTTP destination sent bytes on an idle HTTP channel, not in answer to a request (a body longer than its Content-Length, " +
		"or a second answer): net/http closed the connection, and the answer before them stands. The bytes are not logged, " +
		"since they may quote a message (log_payloads = true shows them); if this repeats, ask the destination's owner to fix its answers")
	return len(p), nil
}

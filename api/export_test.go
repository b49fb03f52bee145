package api

import (
	"net/http"
	"time"

	"github.com/messagefoundry/mf/config"
)

// NewWithLimitsDividedBy is New with every time limit of the HTTP server
// divided by div: a test sees the production limits act without waiting
// for them in full (a limit that is not set stays unset).
func NewWithLimitsDividedBy(o Options, div time.Duration) *Server {
	l := defaultLimits
	l.readHeader /= div
	l.read /= div
	l.write /= div
	l.idle /= div
	l.storeRead /= div
	l.storeScan /= div
	l.statsMaxAge /= div
	l.storeWrite /= div
	return newServer(o, l)
}

// NewWithMaxConnections is New with the API's bound on open connections set
// to n.
func NewWithMaxConnections(o Options, n int) *Server {
	l := defaultLimits
	l.maxConns = n
	return newServer(o, l)
}

// Authenticates reports whether r's credential is one of tokens'.
func Authenticates(r *http.Request, tokens []config.Token) bool {
	_, ok := authenticate(r, tokens)
	return ok
}

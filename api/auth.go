package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/messagefoundry/mf/config"
)

// Permission is what an endpoint requires (DESIGN §8).
type Permission int

// Permissions, from least to most sensitive.
const (
	// MonitoringRead: health, cluster membership, lanes, metrics; no PHI.
	MonitoringRead Permission = iota + 1
	// MessageRead: message contents (PHI).
	MessageRead
	// QueueWrite: operator actions on queue rows (retry, skip, resend,
	// resend-dead) and outbounds (hold, release).
	QueueWrite
	// ConfigWrite: a cluster-wide config reload.
	ConfigWrite
)

// roles maps each role to what it may do: viewer ⊂ operator ⊂ admin.
var roles = map[string][]Permission{
	"viewer":   {MonitoringRead},
	"operator": {MonitoringRead, MessageRead, QueueWrite},
	"admin":    {MonitoringRead, MessageRead, QueueWrite, ConfigWrite},
}

func (p Permission) String() string {
	return [...]string{"", "MONITORING_READ", "MESSAGE_READ", "QUEUE_WRITE", "CONFIG_WRITE"}[p]
}

// HasPermission reports whether role carries p.
func HasPermission(role string, p Permission) bool {
	for _, have := range roles[role] {
		if have == p {
			return true
		}
	}
	return false
}

// principal is the token a request authenticated with.
type principal struct {
	name, role string
}

type principalKey struct{}

// principalOf returns the token require authenticated the request with
// (zero for an open endpoint or public metrics).
func principalOf(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// authenticate finds the token of the request's bearer credential. The
// token's SHA-256 is compared with every configured one in constant time,
// all of them, so that neither a match nor its position shows in the timing.
func authenticate(r *http.Request, tokens []config.Token) (principal, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	// Trimmed before the check for none: a credential of blanks (a
	// no-break space survives the header parser) is no token, and its
	// hash is the empty string's.
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return principal{}, false
	}
	sum := sha256.Sum256([]byte(token))
	var found principal
	match := 0
	for _, t := range tokens {
		want, err := hex.DecodeString(t.SHA256)
		if err != nil || len(want) != len(sum) {
			continue
		}
		if subtle.ConstantTimeCompare(sum[:], want) == 1 {
			found, match = principal{name: t.Name, role: t.Role}, 1
		}
	}
	return found, match == 1
}

// require wraps h so that only a request whose token carries p gets through:
// 401 without a valid token, 403 with one whose role is too small.
func (s *Server) require(p Permission, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if p == MonitoringRead && r.URL.Path == "/metrics" && s.o.Config.API.MetricsPublic {
			h(w, r)
			return
		}
		who, ok := authenticate(r, s.o.Config.API.Tokens)
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, who))
		if !ok {
			// A credential that is none of the tokens is logged (never
			// the credential); no credential at all is a probe or a
			// client not set up, and is not.
			if r.Header.Get("Authorization") != "" {
				if log, unlogged := s.unknownToken.note(time.Now()); log {
					s.o.Log.Warn().Str("remote", r.RemoteAddr).Str("method", r.Method).Str("path", r.URL.Path).Int("unlogged", unlogged).
						Msg("API request refused (401): a bearer token that matches no configured token (revoked, mistyped, or guessed); logged at most once a minute, with how many more came")
				}
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="mf"`)
			writeError(w, http.StatusUnauthorized, "a valid bearer token is required (Authorization: Bearer TOKEN)")
			return
		}
		if !HasPermission(who.role, p) {
			if log, unlogged := s.forbidden.note(time.Now()); log {
				s.o.Log.Warn().Str("token", who.name).Str("role", who.role).Str("permission", p.String()).
					Str("remote", r.RemoteAddr).Str("method", r.Method).Str("path", r.URL.Path).Int("unlogged", unlogged).
					Msg("API request refused (403): the token's role lacks the permission; logged at most once a minute, with how many more came")
			}
			writeError(w, http.StatusForbidden, "token "+who.name+" ("+who.role+") lacks "+p.String())
			return
		}
		h(w, r)
	}
}

// refusals counts refused requests of one kind, so that they are logged
// when they start and at most once a minute after: a client that keeps
// sending a revoked token every few seconds must not fill the log.
type refusals struct {
	mu       sync.Mutex
	logged   time.Time
	unlogged int
}

// note records a refusal at now and reports whether to log it, with how
// many came unlogged since the last line.
func (c *refusals) note(now time.Time) (log bool, unlogged int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.logged.IsZero() && now.Sub(c.logged) < time.Minute {
		c.unlogged++
		return false, 0
	}
	c.logged, unlogged, c.unlogged = now, c.unlogged, 0
	return true, unlogged
}

// NewToken returns a fresh random token and the hex SHA-256 to put in the
// config.
func NewToken() (token, sha string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	token = "mf_" + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	return token, hex.EncodeToString(sum[:]), nil
}

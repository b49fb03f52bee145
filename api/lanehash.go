package api

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"sync/atomic"

	"github.com/messagefoundry/mf/storage"
)

// LaneHashSecret names the cluster secret (storage.Store.Secret) that keys
// the lane hashes GET /lanes shows a token without MESSAGE_READ.
const LaneHashSecret = "lane_hash"

// laneHashKeyBytes is the size of a new key: SHA-256's own size, past which
// an HMAC-SHA256 key adds no strength.
const laneHashKeyBytes = 32

// laneHasher hides lane keys from a viewer. A lane key is usually a patient's
// MRN, a few digits: an unkeyed hash of it is reversed by trying every value
// in seconds. Keyed by a secret the viewer never sees, the hash tells lanes
// apart and nothing more. The key is the cluster's (kept in the database), so
// the hashes a dashboard shows stay the same across failovers and restarts.
type laneHasher struct {
	store storage.Store
	// key is nil until the store has given it. It is fetched without a
	// lock: concurrent first fetches are harmless (Secret returns the one
	// stored value to each), and a slow store then holds up only its own
	// requests.
	key atomic.Pointer[[]byte]
}

// hash returns the name a viewer sees for lane of dest: dest/# and the first
// 6 bytes, in hex, of HMAC-SHA256(key, lane). It fails only when the key is
// not cached and the store cannot give it; the next call tries again. There
// is no fallback to an unkeyed hash: that is what the key is for.
func (h *laneHasher) hash(ctx context.Context, dest, lane string) (string, error) {
	key, err := h.keyOf(ctx)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(lane))
	return dest + "/#" + hex.EncodeToString(mac.Sum(nil)[:6]), nil
}

// keyOf returns the cluster's lane hash key, fetched from the store (or
// made there) on first use.
func (h *laneHasher) keyOf(ctx context.Context) ([]byte, error) {
	if key := h.key.Load(); key != nil {
		return *key, nil
	}
	fresh := make([]byte, laneHashKeyBytes)
	rand.Read(fresh) // never fails: it crashes the program instead (Go 1.24 and later)
	k, err := h.store.Secret(ctx, LaneHashSecret, fresh)
	if err != nil {
		return nil, err
	}
	h.key.Store(&k)
	return k, nil
}

// errCursor is an after that no node of this cluster gave as next_after.
var errCursor = errors.New("not a next_after this cluster gave")

// cursorAEAD seals GET /lanes cursors under a key derived from the lane
// hash key: a cursor names a lane, whose key a viewer must not read, and
// any node of the cluster opens what another sealed.
func (h *laneHasher) cursorAEAD(ctx context.Context) (cipher.AEAD, error) {
	key, err := h.keyOf(ctx)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("mf GET /lanes cursor"))
	block, err := aes.NewCipher(mac.Sum(nil))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// cursor is the next_after of a GET /lanes page whose last lane is lane:
// the lane sealed (cursorAEAD), in URL-safe base64.
func (h *laneHasher) cursor(ctx context.Context, lane string) (string, error) {
	aead, err := h.cursorAEAD(ctx)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(lane), nil)), nil
}

// lane opens a cursor: the lane the page it came with ended at. A cursor
// not sealed by this cluster is errCursor; a store that cannot give the key,
// its error.
func (h *laneHasher) lane(ctx context.Context, cursor string) (string, error) {
	aead, err := h.cursorAEAD(ctx)
	if err != nil {
		return "", err
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) < aead.NonceSize() {
		return "", errCursor
	}
	lane, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], nil)
	if err != nil {
		return "", errCursor
	}
	return string(lane), nil
}

package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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
	key := h.key.Load()
	if key == nil {
		fresh := make([]byte, laneHashKeyBytes)
		rand.Read(fresh) // never fails: it crashes the program instead (Go 1.24 and later)
		k, err := h.store.Secret(ctx, LaneHashSecret, fresh)
		if err != nil {
			return "", err
		}
		key = &k
		h.key.Store(key)
	}
	mac := hmac.New(sha256.New, *key)
	mac.Write([]byte(lane))
	return dest + "/#" + hex.EncodeToString(mac.Sum(nil)[:6]), nil
}

package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"testing"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/storage"
)

// countingWriter is a ResponseWriter that keeps only the size of the body.
type countingWriter struct {
	h    http.Header
	code int
	n    int64
}

func (w *countingWriter) Header() http.Header         { return w.h }
func (w *countingWriter) WriteHeader(code int)        { w.code = code }
func (w *countingWriter) Write(b []byte) (int, error) { w.n += int64(len(b)); return len(b), nil }

// allocated returns the bytes the program allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// GET /messages/{id} of a large message that is not UTF-8 costs about what
// the store's read of it costs, and its answer is as large as its documented
// shape needs: payload with U+FFFD for each byte that is not UTF-8, and
// payload_base64. Before, the answer was built whole in memory and copied
// (to add its newline), each such byte written as the 6-byte escape \ufffd:
// 8 MiB of 0xE9 (é in Latin-1) gave a 61 MB answer and 619 MiB allocated,
// and max_message_bytes may be 512 MiB.
func TestALargeMessageThatIsNotUTF8IsNotBuiltInMemory(t *testing.T) {
	v := start(t, fileOutbound)
	payload := bytes.Repeat([]byte{0xE9}, 8<<20)
	res, err := v.e.Store.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: []storage.NewMessage{
		{Inbound: "adt_in", ControlID: "L1", Payload: payload, Status: storage.MessageRouted},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].MessageID
	s := api.New(api.Options{Config: v.e.Config, Store: v.e.Store, Status: v.e.Status, Log: zerolog.Nop()})
	read := allocated(func() {
		if _, err := v.e.Store.MessageRead(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	})
	w := &countingWriter{h: http.Header{}}
	served := allocated(func() {
		req, _ := http.NewRequest("GET", "/messages/"+strconv.FormatInt(id, 10), nil)
		req.Header.Set("Authorization", "Bearer "+tokens["operator"])
		s.Handler().ServeHTTP(w, req)
	})
	t.Logf("GET /messages/%d of %d bytes of 0xE9: %d, answer %d bytes (Content-Length %q), %.1f MiB allocated (the store's read alone: %.1f MiB)",
		id, len(payload), w.code, w.n, w.h.Get("Content-Length"), float64(served)/(1<<20), float64(read)/(1<<20))
	if w.code != http.StatusOK {
		t.Fatalf("GET /messages/%d: %d", id, w.code)
	}
	// U+FFFD is 3 bytes of UTF-8; base64 is 4 bytes for each 3.
	if want := int64(3*len(payload) + base64.StdEncoding.EncodedLen(len(payload)) + 4096); w.n > want {
		t.Errorf("the answer is %d bytes, want at most %d (3 bytes for each U+FFFD, and the base64)", w.n, want)
	}
	if served > read+uint64(len(payload))/2 {
		t.Errorf("the answer allocated %.1f MiB, want at most %.1f MiB (the store's read and half the payload's size)", float64(served)/(1<<20), float64(read+uint64(len(payload))/2)/(1<<20))
	}
	if cl := w.h.Get("Content-Length"); cl != strconv.FormatInt(w.n, 10) {
		t.Errorf("Content-Length %q, want the %d bytes written", cl, w.n)
	}
}

// The answer for a payload with every kind of byte a JSON string escapes,
// or cannot hold, reads as json.Marshal's: payload with U+FFFD for each
// byte that is not UTF-8, payload_base64 its bytes; its Content-Length is
// its length (Go's client fails a read that ends short of it).
func TestAMessageWithBytesJSONEscapesReadsAsBefore(t *testing.T) {
	v := start(t, fileOutbound)
	payload := []byte("MSH|^~\\&|A|B\r<b>\"q\"\x00\x01\x1f\x7f\t\n\u2028\u2029 \xe9\xc3\xa9\xc3 \xf0\x9f\x92\x89\xf0\x9f\x92 \xed\xa0\x80\xff")
	res, err := v.e.Store.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: []storage.NewMessage{
		{Inbound: "adt_in", ControlID: "L1", Payload: payload, Status: storage.MessageRouted},
	}})
	if err != nil {
		t.Fatal(err)
	}
	code, body := v.call(t, "GET", fmt.Sprintf("/messages/%d", res[0].MessageID), "operator")
	var m api.Message
	if code != http.StatusOK || json.Unmarshal(body, &m) != nil {
		t.Fatalf("GET /messages/%d: %d %s", res[0].MessageID, code, body)
	}
	var want string
	marshalled, _ := json.Marshal(string(payload))
	json.Unmarshal(marshalled, &want)
	if m.Payload != want {
		t.Errorf("payload %q, want %q (json.Marshal's)", m.Payload, want)
	}
	if m.PayloadBase64 == nil {
		t.Fatal("payload_base64 null for a payload that is not UTF-8")
	}
	if got, err := base64.StdEncoding.DecodeString(*m.PayloadBase64); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("payload_base64 decodes to %q (%v), want %q", got, err, payload)
	}
}

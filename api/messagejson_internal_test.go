package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"unicode/utf8"
)

// messageAnswer writes a Message as json.Marshal does: byte for byte when
// the payload is UTF-8, and the same when read back when it is not (where
// each U+FFFD is written as it is, not as \ufffd), whatever the payload
// holds of the bytes JSON escapes.
func TestAMessageAnswerIsAMessage(t *testing.T) {
	at, resent := 1767225600.25, int64(9)
	head := MessageHead{ID: 7, Inbound: "adt<in>", ReceivedAt: &at, ControlID: "C&1", MessageType: "ADT^A01", Status: "routed", Error: "a \"quoted\" \u2028 error"}
	queue := []QueueRow{{ID: 3, Destination: "emr", Lane: "emr/P\x01", Status: "dead", Attempts: 2, LastError: "no", ResentAs: &resent}}
	// Mostly the bytes JSON treats apart, and pieces of UTF-8 sequences.
	alphabet := []byte("A<>&\"\\\x00\x01\x08\x0c\n\r\t\x1f\x7f \xe9\xc3\xa9\xe2\x80\xa8\xa9\xf0\x9f\x92\x89\xed\xa0\xff")
	rng := rand.New(rand.NewPCG(1, 2))
	payloads := [][]byte{nil, {}, []byte("MSH|^~\\&|A\rPID|1||P1\r"), bytes.Repeat([]byte{0xe9}, 100)}
	for range 2000 {
		p := make([]byte, rng.IntN(40))
		for i := range p {
			p[i] = alphabet[rng.IntN(len(alphabet))]
		}
		payloads = append(payloads, p)
	}
	for _, p := range payloads {
		m := Message{MessageHead: head, Payload: string(p), Queue: queue}
		if !utf8.Valid(p) {
			b64 := base64.StdEncoding.EncodeToString(p)
			m.PayloadBase64 = &b64
		}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := (messageAnswer{head: head, payload: p, queue: queue}).writeTo(&got); err != nil {
			t.Fatal(err)
		}
		var n byteCount
		(messageAnswer{head: head, payload: p, queue: queue}).writeTo(&n)
		if int(n) != got.Len() {
			t.Fatalf("payload %q: counted %d bytes, wrote %d", p, n, got.Len())
		}
		if utf8.Valid(p) {
			if !bytes.Equal(got.Bytes(), append(want, '\n')) {
				t.Fatalf("payload %q:\n got %s\nwant %s", p, got.Bytes(), want)
			}
			continue
		}
		var gotM, wantM Message
		if err := json.Unmarshal(got.Bytes(), &gotM); err != nil {
			t.Fatalf("payload %q: the answer is not JSON (%v): %s", p, err, got.Bytes())
		}
		json.Unmarshal(want, &wantM)
		if !reflect.DeepEqual(gotM, wantM) {
			t.Fatalf("payload %q: the answer reads as\n%+v\nwant\n%+v", p, gotM, wantM)
		}
	}
}

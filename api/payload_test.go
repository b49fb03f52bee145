package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/storage"
)

// A message in Latin-1 (MSH-18 8859/1, common in HL7 v2) is stored byte for
// byte, and GET /messages/{id} gives those bytes back: JSON strings carry
// only UTF-8, so payload shows U+FFFD for each byte that is not, and
// payload_base64 has the message as received. A UTF-8 message's payload is
// exact and its payload_base64 null. Before, the answer had only payload:
// MÜLLER came back as M\ufffdLLER, and the operator could not see what the
// sender sent.
func TestMessagePayloadThatIsNotUTF8(t *testing.T) {
	v := start(t, fileOutbound)
	latin1 := []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|L1|P|2.5|||||8859/1\rPID|1||P2^^^H||M\xdcLLER^J\xd6RG\r")
	utf8 := []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|U1|P|2.5|||||UNICODE UTF-8\rPID|1||P3^^^H||MÜLLER^JÖRG\r")
	res, err := v.e.Store.MessageIngest(context.Background(), storage.MessageIngestParams{Messages: []storage.NewMessage{
		{Inbound: "adt_in", ControlID: "L1", Payload: latin1, Status: storage.MessageRouted},
		{Inbound: "adt_in", ControlID: "U1", Payload: utf8, Status: storage.MessageRouted},
	}})
	if err != nil {
		t.Fatal(err)
	}
	read := func(id int64) map[string]any {
		t.Helper()
		code, body := v.call(t, "GET", fmt.Sprintf("/messages/%d", id), "operator")
		var m map[string]any
		if code != http.StatusOK || json.Unmarshal(body, &m) != nil {
			t.Fatalf("GET /messages/%d: %d %s", id, code, body)
		}
		return m
	}
	m := read(res[0].MessageID)
	b64, ok := m["payload_base64"].(string)
	if !ok {
		t.Fatalf("a Latin-1 message: payload_base64 %#v, payload %q; want its bytes in base64", m["payload_base64"], m["payload"])
	}
	if got, err := base64.StdEncoding.DecodeString(b64); err != nil || string(got) != string(latin1) {
		t.Fatalf("a Latin-1 message: payload_base64 decodes to %q (%v), want %q", got, err, latin1)
	}
	if p, _ := m["payload"].(string); !strings.Contains(p, "M\uFFFDLLER") {
		t.Fatalf("a Latin-1 message: payload %q, want the text with U+FFFD for the bytes that are not UTF-8", p)
	}

	m = read(res[1].MessageID)
	if v, present := m["payload_base64"]; !present || v != nil || m["payload"] != string(utf8) {
		t.Fatalf("a UTF-8 message: payload %q, payload_base64 %#v (present %v); want the payload exact and payload_base64 null", m["payload"], v, present)
	}
}

// An answer may carry PHI (a message, a lane's key, an error a destination
// quoted): no cache on the way, nor the operator's browser, may keep it.
func TestAnswersAreNotCached(t *testing.T) {
	v := start(t, fileOutbound)
	id := v.ingest(t, 1)[0]
	for _, path := range []string{fmt.Sprintf("/messages/%d", id), "/lanes", "/cluster/status", "/no/such/path"} {
		req, _ := http.NewRequest("GET", v.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tokens["operator"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("GET %s (%d): Cache-Control %q, want no-store", path, resp.StatusCode, got)
		}
	}
}

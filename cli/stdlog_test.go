package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/lanes"
)

// echoingPastItsAnswer is an HTTP destination that answers 200 with an
// empty body, then writes the message it got back after the answer: bytes
// beyond its Content-Length, which net/http reads on the idle connection.
func echoingPastItsAnswer(t *testing.T) string {
	t.Helper()
	return "http://" + enginetest.ServeTCP(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n%s", body)
		time.Sleep(5 * time.Second)
	}) + "/hl7"
}

// net/http's client prints what a server sends on an idle connection, not
// in answer to a request, with the standard library's log package, quoting
// the bytes: a destination's echo of the message, patient fields and all,
// went to stderr as a plain text line beside the JSON log. mf run routes
// that package into the node's log, without the bytes unless log_payloads.
func TestTheHTTPClientsOwnLogLinesCarryNoPatientData(t *testing.T) {
	for _, payloads := range []bool{false, true} {
		t.Run(fmt.Sprintf("log_payloads=%v", payloads), func(t *testing.T) {
			var logs logbuf.Buffer
			restore := routeStdlibLog(zerolog.New(&logs), func() bool { return payloads })
			defer restore()
			s, err := lanes.NewSender(config.Outbound{Name: "emr", Type: config.OutboundHTTP, URL: echoingPastItsAnswer(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			msg := "MSH|^~\\&|A|B|C|D|20261126||ADT^A01|C1|P|2.5.1\rPID|1||SECRETMRN4711||DOE^JANE\r"
			if err := s.Send(context.Background(), lanes.Outgoing{QueueID: 1, ControlID: "C1", Payload: []byte(msg)}); err != nil {
				t.Fatal(err)
			}
			enginetest.WaitFor(t, "net/http's line about the bytes on the idle connection", 10*time.Second, func() bool {
				return strings.Contains(logs.String(), "idle HTTP channel")
			})
			got := logs.String()
			var rec struct {
				Level, Component, Message string
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(got)), &rec); err != nil || rec.Level != "warn" || rec.Component != "net/http" {
				t.Fatalf("not one WARN line of the node's log, component net/http (%v):\n%s", err, got)
			}
			if leaked := strings.Contains(got, "SECRETMRN4711"); leaked != payloads {
				t.Fatalf("log_payloads %v, the line carries the patient id: %v:\n%s", payloads, leaked, got)
			}
		})
	}
}

package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/storage"
)

// messagesNode is apiNode with inbound "in", routed to emr and lab by
// PID-3.1, both held so that their rows stay as the test leaves them, and
// the messages of ms ingested; it returns the engine, the API's URL and the
// ids the store gave them.
func messagesNode(t *testing.T, ms ...storage.NewMessage) (*enginetest.Engine, string, []storage.IngestedMessage) {
	t.Helper()
	e, url := apiNodeWith(t, inboundRoutedTo(t, "emr", "lab"))
	ctx := context.Background()
	for _, dest := range []string{"emr", "lab"} {
		if _, err := e.Store.OutboundHold(ctx, storage.OutboundHoldParams{Outbound: dest}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.Store.MessageIngest(ctx, storage.MessageIngestParams{Messages: ms})
	if err != nil {
		t.Fatal(err)
	}
	return e, url, res
}

// routed is a message of inbound "in" for patient, queued for emr and lab.
func routed(controlID, patient string) storage.NewMessage {
	return storage.NewMessage{Inbound: "in", ControlID: controlID, MessageType: "ADT^A01", Payload: []byte(enginetest.ADT(controlID, patient)),
		Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "emr", Lane: "emr/" + patient}, {Destination: "lab", Lane: "lab/" + patient}}}
}

// read is the store's message id with its queue rows.
func read(t *testing.T, e *enginetest.Engine, id int64) storage.MessageDetail {
	t.Helper()
	d, err := e.Store.MessageRead(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// columns splits a line of a table at its gaps of two blanks or more.
var columns = regexp.MustCompile(`  +`)

// nextMessages is the command mf messages ends a page with when more
// messages follow.
var nextMessages = regexp.MustCompile(`(?m)^more messages: mf (messages .*)$`)

// Operators had only curl for GET /messages: mf messages prints a page of
// it as a table, a line per message as the store has it (its queue rows as
// destination:status), newest first, and the command for the next page,
// which repeats the window the API searched; a walk of the pages lists
// every message once. A control character in a value is quoted.
func TestMessagesListsPagesOfMessages(t *testing.T) {
	rejected := storage.NewMessage{Inbound: "in", ControlID: "BAD\t1", Payload: []byte("not hl7"), Status: storage.MessageRejected, Error: "no MSH segment"}
	e, url, res := messagesNode(t, routed("M0", "P1"), routed("M1", "P2"), rejected, routed("M3", "P3"), routed("M4", "P4"))
	ctx := context.Background()
	// M0's lab row is set aside: dead.
	if _, err := e.Store.QueueSkip(ctx, storage.QueueSkipParams{ID: res[0].QueueIDs[1], Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(TokenEnv, apiTokens["operator"])

	// What each message's line must say, from the store.
	want := map[string][]string{}
	for _, r := range res {
		d := read(t, e, r.MessageID)
		m := d.Message
		var queue []string
		for _, q := range d.Queue {
			queue = append(queue, q.Destination+":"+q.Status)
		}
		cell := strings.Join(queue, " ")
		if cell == "" {
			cell = "-"
		}
		typ := m.MessageType
		if typ == "" {
			typ = "-"
		}
		want[strconv.FormatInt(m.ID, 10)] = []string{strconv.FormatInt(m.ID, 10), m.ReceivedAt.UTC().Format("2006-01-02 15:04:05"),
			m.Inbound, printable(m.ControlID), typ, m.Status, cell}
	}
	if w := want[strconv.FormatInt(res[0].MessageID, 10)]; w[6] != "emr:pending lab:dead" {
		t.Fatalf("M0's queue rows in the store: %q; want emr pending, lab dead", w[6])
	}

	var walked []string
	args := []string{"messages", "--api", url, "--limit", "2"}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("the walk of mf messages --limit 2 does not end")
		}
		out, err := runMF(t, args...)
		if err != nil {
			t.Fatalf("mf %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		lines := strings.Split(out, "\n")
		if got := columns.Split(lines[0], -1); !slices.Equal(got, []string{"ID", "RECEIVED (UTC)", "INBOUND", "CONTROL ID", "TYPE", "STATUS", "QUEUE"}) {
			t.Fatalf("mf %s: header %q", strings.Join(args, " "), lines[0])
		}
		for _, l := range lines[1:] {
			if l == "" {
				break
			}
			got := columns.Split(l, -1)
			if !slices.Equal(got, want[got[0]]) {
				t.Errorf("message line %q; want the store's %q", l, want[got[0]])
			}
			walked = append(walked, got[0])
		}
		m := nextMessages.FindStringSubmatch(out)
		if m == nil {
			if !strings.HasSuffix(out, "\nlast page\n") {
				t.Fatalf("mf %s ends with no next page and no \"last page\":\n%s", strings.Join(args, " "), out)
			}
			break
		}
		// The same node, limit and window, before the page's last id.
		last := walked[len(walked)-1]
		if !strings.HasPrefix(m[1], "messages --api "+url+" --limit 2 --since 20") || !strings.HasSuffix(m[1], " --before-id "+last) {
			t.Fatalf("the next page's command is %q; want --api %s --limit 2, the window searched and --before-id %s", m[0], url, last)
		}
		args = strings.Fields(m[1])
	}
	var ids []string
	for i := len(res) - 1; i >= 0; i-- {
		ids = append(ids, strconv.FormatInt(res[i].MessageID, 10))
	}
	if !slices.Equal(walked, ids) {
		t.Fatalf("the pages of mf messages --limit 2 listed %q; want %q, newest first", walked, ids)
	}

	// Filters go to the API as its parameters; the rejected message's control
	// id, with a tab, is quoted and found.
	out, err := runMF(t, "messages", "--api", url, "--status", "rejected", "--control-id", "BAD\t1", "--inbound", "in", "--since", "2020-01-01T00:00:00Z")
	if err != nil || !strings.Contains(out, `"BAD\t1"`) || strings.Count(out, "\n") != 4 || !strings.HasSuffix(out, "\nlast page\n") {
		t.Fatalf("mf messages --status rejected --control-id 'BAD<tab>1': %v, printed\n%s\nwant its one line, quoted, and last page", err, out)
	}
	// A page of the API's JSON as it is.
	out, err = runMF(t, "messages", "--api", url, "--json", "--control-id", "M3")
	if err != nil || !strings.Contains(out, `"control_id": "M3"`) || !strings.Contains(out, `"next_before_id": null`) {
		t.Fatalf("mf messages --json --control-id M3: %v, printed\n%s", err, out)
	}
	// None found: said so, with the window.
	out, err = runMF(t, "messages", "--api", url, "--control-id", "NOPE", "--since", "2020-01-01T00:00:00Z", "--until", "2020-01-02T00:00:00Z")
	if want := "no message found received from 2020-01-01T00:00:00Z to 2020-01-02T00:00:00Z\n"; err != nil || out != want {
		t.Fatalf("mf messages with nothing found: %v, printed %q; want %q", err, out, want)
	}
}

// mf message ID prints the message as the store has it: its metadata, its
// queue rows, then its payload a segment a line (HL7 separates them with
// CR, which a terminal does not show as a line break); a payload that is
// not UTF-8 is said to be so and printed exactly, in base64.
func TestMessageShowsOneMessage(t *testing.T) {
	latin1 := []byte("MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01|L1|P|2.5.1|||||8859/1\rPID|1||P9^^^HOSP^MR||M\xdcLLER^J\xd6RG\r")
	e, url, res := messagesNode(t, routed("M0", "P1"),
		storage.NewMessage{Inbound: "in", ControlID: "L1", MessageType: "ADT^A01", Payload: latin1, Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "emr", Lane: "emr/P9"}}})
	ctx := context.Background()
	if _, err := e.Store.QueueSkip(ctx, storage.QueueSkipParams{ID: res[0].QueueIDs[0], Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(TokenEnv, apiTokens["operator"])

	d := read(t, e, res[0].MessageID)
	id := strconv.FormatInt(d.Message.ID, 10)
	out, err := runMF(t, "message", "--api", url, id)
	if err != nil {
		t.Fatalf("mf message %s: %v\n%s", id, err, out)
	}
	for _, w := range []string{
		"message " + id + "\n",
		"received    " + d.Message.ReceivedAt.UTC().Format("2006-01-02 15:04:05.000") + " UTC\n",
		"inbound     in\n", "control id  M0\n", "type        ADT^A01\n", "status      routed\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("mf message %s printed\n%s\nwant it to say %q", id, out, w)
		}
	}
	lines := strings.Split(out, "\n")
	header := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "QUEUE ") })
	if header < 0 || !slices.Equal(columns.Split(lines[header], -1),
		[]string{"QUEUE ID", "DESTINATION", "LANE", "STATUS", "HELD", "ATTEMPTS", "NEXT ATTEMPT (UTC)", "RESENT AS", "LAST ERROR"}) {
		t.Fatalf("mf message %s printed no queue table:\n%s", id, out)
	}
	for i, q := range d.Queue {
		got := columns.Split(lines[header+1+i], -1)
		want := []string{strconv.FormatInt(q.ID, 10), q.Destination, q.Lane, q.Status, "-", strconv.FormatInt(q.Attempts, 10),
			q.NextAttemptAt.UTC().Format("2006-01-02 15:04:05"), "-", q.LastError}
		if q.LastError == "" {
			want[8] = "-"
		}
		if !slices.Equal(got, want) {
			t.Errorf("queue line %q; want the store's %q", lines[header+1+i], want)
		}
	}
	// The payload, a segment a line, no CR left.
	wantPayload := "payload:\n" + strings.ReplaceAll(string(d.Message.Payload), "\r", "\n")
	if !strings.HasSuffix(out, wantPayload) || strings.Contains(out, "\r") {
		t.Fatalf("mf message %s printed\n%q\nwant it to end with\n%q", id, out, wantPayload)
	}

	// Latin-1: said so, and the bytes exactly, in base64 (the JSON's
	// payload has U+FFFD for each byte that is not UTF-8).
	l1 := strconv.FormatInt(res[1].MessageID, 10)
	out, err = runMF(t, "message", "--api", url, l1)
	if err != nil || !strings.Contains(out, "payload ("+strconv.Itoa(len(latin1))+" bytes) is not UTF-8") || strings.Contains(out, "\uFFFD") || strings.Contains(out, "MSH|") {
		t.Fatalf("mf message %s (Latin-1): %v, printed\n%s\nwant it said not UTF-8, no U+FFFD, no mangled segments", l1, err, out)
	}
	said := strings.Index(out, "\npayload (")
	b64 := strings.Join(strings.Fields(out[said+1+strings.Index(out[said+1:], "\n"):]), "")
	if got, err := base64.StdEncoding.DecodeString(b64); err != nil || string(got) != string(latin1) {
		t.Fatalf("mf message %s (Latin-1): its base64 %q decodes to %q, %v; want the bytes stored", l1, b64, got, err)
	}
	out, err = runMF(t, "message", "--api", url, "--json", l1)
	if err != nil || !strings.Contains(out, `"payload_base64": "`+base64.StdEncoding.EncodeToString(latin1)+`"`) {
		t.Fatalf("mf message --json %s: %v, printed\n%s\nwant the API's JSON", l1, err, out)
	}
}

// mf resend ID queues the message again, for each of its destinations or
// the one --destination names, and says which new queue ids it got, for
// which destination: the store has them, pending.
func TestResendQueuesAMessageAgain(t *testing.T) {
	e, url, res := messagesNode(t, routed("M0", "P1"))
	ctx := context.Background()
	if _, err := e.Store.QueueSkip(ctx, storage.QueueSkipParams{ID: res[0].QueueIDs[0], Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(TokenEnv, apiTokens["operator"])
	id := strconv.FormatInt(res[0].MessageID, 10)

	out, err := runMF(t, "resend", "--api", url, id)
	if err != nil {
		t.Fatalf("mf resend %s: %v\n%s", id, err, out)
	}
	d := read(t, e, res[0].MessageID)
	if len(d.Queue) != 4 {
		t.Fatalf("after mf resend %s the store has %d queue rows; want 4", id, len(d.Queue))
	}
	emr, lab := d.Queue[2], d.Queue[3]
	want := fmt.Sprintf("message %s queued again: new queue id %d for outbound \"emr\", new queue id %d for outbound \"lab\", each at the tail of the lane the routes in force give it\n", id, emr.ID, lab.ID)
	if out != want || emr.Destination != "emr" || lab.Destination != "lab" || emr.Status != storage.QueuePending || lab.Status != storage.QueuePending {
		t.Fatalf("mf resend %s printed %q; want %q (the store: %+v)", id, out, want, d.Queue[2:])
	}
	if d.Queue[0].ResentAs != emr.ID {
		t.Fatalf("the dead emr row is resent as %d; want %d", d.Queue[0].ResentAs, emr.ID)
	}

	out, err = runMF(t, "resend", "--api", url, "--destination", "lab", id)
	d = read(t, e, res[0].MessageID)
	want = fmt.Sprintf("message %s queued again: new queue id %d for outbound \"lab\", at the tail of the lane the routes in force give it\n", id, d.Queue[len(d.Queue)-1].ID)
	if err != nil || out != want || len(d.Queue) != 5 || d.Queue[4].Destination != "lab" {
		t.Fatalf("mf resend --destination lab %s: %v, printed %q; want %q (the store: %d rows)", id, err, out, want, len(d.Queue))
	}
	out, err = runMF(t, "resend", "--api", url, "--json", "--destination", "emr", id)
	d = read(t, e, res[0].MessageID)
	if err != nil || !strings.Contains(out, `"message_id": `+id) || !strings.Contains(out, fmt.Sprintf(`"id": %d`, d.Queue[len(d.Queue)-1].ID)) {
		t.Fatalf("mf resend --json %s: %v, printed\n%s\nwant the API's JSON", id, err, out)
	}
}

// mf messages, mf message and mf resend fail, exit 1, with the API's words
// and what to do: no such message, a viewer's token, a bad parameter, a
// message that cannot be resent, no API; and, with no request sent, an id
// that is missing, not one, or not a positive integer.
func TestMessageCommandsRefusals(t *testing.T) {
	rejected := storage.NewMessage{Inbound: "in", ControlID: "R", Payload: []byte("not hl7"), Status: storage.MessageRejected, Error: "no MSH segment"}
	e, url, res := messagesNode(t, routed("M0", "P1"), rejected)
	id, rej := strconv.FormatInt(res[0].MessageID, 10), strconv.FormatInt(res[1].MessageID, 10)
	counted, asked := answering(t, http.StatusTeapot, "no request was to reach this server")
	nobody := "http://" + enginetest.FreeAddr(t)
	op, viewer := apiTokens["operator"], apiTokens["viewer"]
	checkRefusals(t, []refusal{
		{"no such message", op, []string{"message", "--api", url, "999999"}, []string{"404 Not Found", "no message 999999"}},
		{"no such message, resend", op, []string{"resend", "--api", url, "999999"}, []string{"404 Not Found", "no message 999999"}},
		{"viewer reads", viewer, []string{"message", "--api", url, id}, []string{"403 Forbidden", "mf message needs a token of role operator or admin"}},
		{"viewer searches", viewer, []string{"messages", "--api", url}, []string{"403 Forbidden", "mf messages needs a token of role operator or admin"}},
		{"viewer resends", viewer, []string{"resend", "--api", url, id}, []string{"403 Forbidden", "mf resend needs a token of role operator or admin"}},
		{"no token", "", []string{"message", "--api", url, id}, []string{"401 Unauthorized", "set " + TokenEnv + " to a token of role operator or admin"}},
		{"bad limit", op, []string{"messages", "--api", url, "--limit", "0"}, []string{"400 Bad Request", "query parameter limit: must be an integer from 1 to 1000"}},
		{"bad status", op, []string{"messages", "--api", url, "--status", "dead"}, []string{"400 Bad Request", "query parameter status"}},
		{"bad since", op, []string{"messages", "--api", url, "--since", "yesterday"}, []string{"400 Bad Request", "query parameter since: not an RFC 3339 time"}},
		{"empty destination", op, []string{"resend", "--api", url, "--destination", "", id}, []string{"400 Bad Request", "query parameter destination: empty"}},
		{"unknown destination", op, []string{"resend", "--api", url, "--destination", "nope", id}, []string{"422 Unprocessable Entity", `destination "nope" is not an [[outbound]]`}},
		{"rejected message", op, []string{"resend", "--api", url, rej}, []string{"409 Conflict", "message " + rej + " was rejected"}},
		{"no node", op, []string{"message", "--api", nobody, id}, []string{"GET " + nobody + "/messages/" + id, "no API answers at " + nobody}},
		{"an argument to messages", op, []string{"messages", "--api", counted, "M0"}, []string{"mf messages takes no argument"}},
		{"no id", op, []string{"message", "--api", counted}, []string{"mf message needs the id of a message: mf message [--api URL] MESSAGE_ID"}},
		{"no id, resend", op, []string{"resend", "--api", counted}, []string{"mf resend needs the id of a message"}},
		{"two ids", op, []string{"message", "--api", counted, "1", "2"}, []string{"mf message takes one message id", `"1", "2"`, "one at a time"}},
		{"a flag after the id", op, []string{"resend", "--api", counted, "1", "--destination", "lab"}, []string{"mf resend takes one message id", "flags go before the message id"}},
		{"not a number", op, []string{"message", "--api", counted, "M0"}, []string{`mf message: message id "M0" is not a positive integer`}},
		{"zero", op, []string{"resend", "--api", counted, "0"}, []string{`mf resend: message id "0" is not a positive integer`}},
		{"a sign", op, []string{"message", "--api", counted, "+1"}, []string{`message id "+1" is not a positive integer`}},
		{"too large", op, []string{"message", "--api", counted, "9223372036854775808"}, []string{`message id "9223372036854775808" is not a positive integer`}},
	})
	if n := asked.Load(); n != 0 {
		t.Fatalf("the refused arguments sent %d requests; want none", n)
	}
	if d := read(t, e, res[0].MessageID); len(d.Queue) != 2 {
		t.Fatalf("after the refusals message %s has %d queue rows; want its 2", id, len(d.Queue))
	}
}

// A payload's segments are a line each however they end (CR, CR LF, LF);
// any other control character is shown escaped, so that a payload cannot
// drive the operator's terminal, and a tab is kept.
func TestSegmentsOfAPayload(t *testing.T) {
	for _, tc := range []struct{ payload, want string }{
		{"MSH|a\rPID|b\r", "MSH|a\nPID|b\n"},
		{"MSH|a\r\nPID|b", "MSH|a\nPID|b\n"},
		{"MSH|a\nPID|\x1b[2J|\t|\x0b\x1c\u0085", "MSH|a\nPID|\\x1b[2J|\t|\\x0b\\x1c\\x85\n"},
		{"", ""},
	} {
		if got := segments(tc.payload); got != tc.want {
			t.Errorf("segments(%q) = %q; want %q", tc.payload, got, tc.want)
		}
	}
}

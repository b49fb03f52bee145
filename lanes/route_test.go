package lanes_test

import (
	"strings"
	"testing"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/lanes"
)

// newRouter is the router of the config file text toml.
func newRouter(t *testing.T, toml string) *lanes.Router {
	t.Helper()
	cfg, err := config.Parse([]byte(toml), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := lanes.NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func routeOne(t *testing.T, laneKey, msg string) string {
	t.Helper()
	r := newRouter(t, `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:2575"

[[outbound]]
name = "lab"
type = "file"
directory = "out"

[[route]]
from = "adt_in"
to = ["lab"]
lane_key = "`+laneKey+`"
`)
	m, err := hl7.Parse([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	d := r.Route("adt_in", m)
	if len(d) != 1 {
		t.Fatalf("%d deliveries, want 1", len(d))
	}
	return d[0].Lane
}

// A patient's lane does not depend on how the sender had to escape the key:
// the same MRN, A#1, written as it is by a sender whose MSH-2 has four
// characters and as A\P\1 once it adds the v2.7 truncation character '#'
// (which must then be escaped), is one patient, in one lane, in order. So
// is 12&3, escaped \T\ under the default separators and written as it is
// by a feed whose subcomponent separator is another character.
func TestALaneKeyIsTheValueNotItsEscaping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b string }{
		{
			"MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20260101||ADT^A01|C1|P|2.5.1\rPID|1||A#1^^^HOSP^MR\r",
			"MSH|^~\\&#|EPIC|HOSP|LAB|HOSP|20260101||ADT^A08|C2|P|2.7\rPID|1||A\\P\\1^^^HOSP^MR\r",
		},
		{
			"MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20260101||ADT^A01|C3|P|2.5.1\rPID|1||12\\T\\3^^^HOSP^MR\r",
			"MSH|^~\\$|PAS|HOSP|LAB|HOSP|20260101||ADT^A08|C4|P|2.5.1\rPID|1||12&3^^^HOSP^MR\r",
		},
	} {
		a, b := routeOne(t, "PID-3.1", tc.a), routeOne(t, "PID-3.1", tc.b)
		if a != b {
			t.Errorf("one patient in two lanes: %q and %q", a, b)
		}
	}
	if a, b := routeOne(t, "PID-3.1", "MSH|^~\\&|E|H|L|H|1||ADT^A01|C5|P|2.5.1\rPID|1||12\\T\\3\r"),
		routeOne(t, "PID-3.1", "MSH|^~\\&|E|H|L|H|1||ADT^A01|C6|P|2.5.1\rPID|1||12\\T\\4\r"); a == b {
		t.Errorf("two patients in one lane: %q", a)
	}
}

// HL7 gives a value's trailing blanks and its trailing empty components no
// meaning: ST is "left justified with trailing blanks optional" (v2.5
// 2.A.74), and components or subcomponents not valued at the end of a field
// "need not be represented" by their separators (v2.5 2.5.5). A sender that
// pads its MRNs, or writes the empty components the standard lets another
// leave out, names the same patient: one lane, or its messages lose their
// order.
func TestALaneKeyIgnoresWhatHL7GivesNoMeaning(t *testing.T) {
	t.Parallel()
	const msh = "MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20260101||ADT^A01|C1|P|2.5.1\r"
	for _, tc := range []struct{ key, a, b string }{
		{"PID-3.1", "PID|1||123^^^HOSP^MR\r", "PID|1||123  ^^^HOSP^MR\r"},
		{"PID-3.1", "PID|1||123^^^HOSP^MR\r", "PID|1||123\\X20\\^^^HOSP^MR\r"},
		{"PID-3", "PID|1||123^^^HOSP^MR\r", "PID|1||123^^^HOSP^MR^^\r"},
		{"PID-3", "PID|1||123^^^HOSP^MR\r", "PID|1||123 ^^^HOSP &^MR \r"},
		{"PID-3.4", "PID|1||123^^^HOSP\r", "PID|1||123^^^HOSP&&\r"},
	} {
		if a, b := routeOne(t, tc.key, msh+tc.a), routeOne(t, tc.key, msh+tc.b); a != b {
			t.Errorf("%s: one patient in two lanes: %q and %q", tc.key, a, b)
		}
	}
	for _, tc := range []struct{ key, a, b string }{
		{"PID-3.1", "PID|1||123^^^HOSP^MR\r", "PID|1|| 123^^^HOSP^MR\r"}, // leading blanks are data
		{"PID-3", "PID|1||123^^^HOSP^MR\r", "PID|1||123^^^HOSP^PI\r"},
		{"PID-3", "PID|1||123^^^HOSP\r", "PID|1||123^^^HOSP&1\r"},
		{"PID-3", "PID|1||123^^^HOSP&1\r", "PID|1||123^^^HOSP^1\r"}, // a subcomponent is not a component
	} {
		if a, b := routeOne(t, tc.key, msh+tc.a), routeOne(t, tc.key, msh+tc.b); a == b {
			t.Errorf("%s: two patients in one lane: %q", tc.key, a)
		}
	}
}

// A lane key of a message in BIG-5 is split where its characters end: 乞
// (A4 5E) holds a component separator's byte. Read byte by byte, the
// whole-field key PID-3 of a patient 乞 was cut to A4, half a character,
// its 5E taken for an empty last component and dropped.
func TestALaneKeyOfABig5MessageSplitsBetweenCharacters(t *testing.T) {
	t.Parallel()
	const msh = "MSH|^~\\&|HIS|HOSP|LAB|HOSP|20260101||ADT^A01|C1|P|2.5.1||||||BIG-5\r"
	for _, pid := range []string{"PID|1||\xa4\x5e\r", "PID|1||\xa4\x5e  ^\r"} {
		if got := routeOne(t, "PID-3", msh+pid); got != "lab/\xa4\x5e" {
			t.Errorf("%q: lane %q; want lab/\\xa4\\x5e", pid, got)
		}
	}
}

// Routes choose destinations and lanes as DESIGN §7 and the README say:
// every filter of a route must match (a route's filters are ANDed); a
// destination named by several matching routes gets the message once, in
// the lane of the first of them in the file; a route without lane_key
// gives one lane per destination; a route of another inbound is not
// evaluated at all.
func TestRoutesChooseDestinationsAndLanes(t *testing.T) {
	t.Parallel()
	r := newRouter(t, `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:2575"

[[inbound]]
name = "lab_in"
type = "mllp"
listen = "127.0.0.1:2576"

[[outbound]]
name = "lab"
type = "file"
directory = "out/lab"

[[outbound]]
name = "emr"
type = "file"
directory = "out/emr"

[[outbound]]
name = "billing"
type = "file"
directory = "out/billing"

[[route]]
from = "adt_in"
to = ["lab"]
filter = { "MSH-9.1" = "ADT", "MSH-9.2" = "A01" }
lane_key = "PID-3.1"

[[route]]
from = "adt_in"
to = ["lab", "emr"]
filter = { "MSH-9.1" = "ADT" }
lane_key = "PID-5.1"

[[route]]
from = "adt_in"
to = ["billing"]

[[route]]
from = "lab_in"
to = ["emr"]
`)
	route := func(inbound, trigger string) string {
		m, err := hl7.Parse([]byte("MSH|^~\\&|E|H|L|H|20260101||ADT^" + trigger + "|C1|P|2.5.1\rPID|1||MRN1||DOE^JANE\r"))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range r.Route(inbound, m) {
			got = append(got, d.Destination+"@"+d.Lane)
		}
		return strings.Join(got, " ")
	}
	for _, tt := range []struct{ inbound, trigger, want string }{
		// Both adt_in routes to lab match: lab once, in the first's lane.
		{"adt_in", "A01", "lab@lab/MRN1 emr@emr/DOE billing@billing"},
		// MSH-9.2 fails the first route's second filter: the second route's lane.
		{"adt_in", "A08", "lab@lab/DOE emr@emr/DOE billing@billing"},
		{"lab_in", "A01", "emr@emr"},
		{"nobody", "A01", ""},
	} {
		if got := route(tt.inbound, tt.trigger); got != tt.want {
			t.Errorf("%s ADT^%s: %q, want %q", tt.inbound, tt.trigger, got, tt.want)
		}
	}
}

// A filter compares a field's value as HL7 means it, as a lane_key reads
// it: a sender that writes another component separator, escapes a
// character its separators use, or pads the field, sends the same value.
// Compared as written, such a sender's messages matched no route, and were
// acknowledged AA and stored unrouted, delivered nowhere.
func TestAFilterComparesTheValueNotItsSpelling(t *testing.T) {
	t.Parallel()
	r := newRouter(t, `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:2575"

[[outbound]]
name = "lab"
type = "file"
directory = "out/lab"

[[route]]
from = "adt_in"
to = ["lab"]
filter = { "MSH-9" = "ADT^A01", "PV1-3.1" = "4W&B", "MSH-4" = "HOSP" }
`)
	routed := func(msg string) bool {
		t.Helper()
		m, err := hl7.Parse([]byte(msg))
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Route("adt_in", m)) == 1
	}
	for _, msg := range []string{
		"MSH|^~\\&|E|HOSP|L|H|1||ADT^A01|C1|P|2.5.1\rPV1|1|I|4W\\T\\B\r",
		"MSH|$~\\&|E|HOSP|L|H|1||ADT$A01|C2|P|2.5.1\rPV1|1|I|4W\\T\\B\r",     // another component separator
		"MSH|^~\\$|E|HOSP|L|H|1||ADT^A01|C3|P|2.5.1\rPV1|1|I|4W&B\r",         // & is data under $
		"MSH|^~\\&|E|HOSP  |L|H|1||ADT^A01^|C4|P|2.5.1\rPV1|1|I|4W\\T\\B \r", // padded, an empty trailing component
	} {
		if !routed(msg) {
			t.Errorf("%q: not routed; want it routed to lab", msg)
		}
	}
	for _, msg := range []string{
		"MSH|^~\\&|E|HOSP|L|H|1||ADT^A08|C5|P|2.5.1\rPV1|1|I|4W\\T\\B\r",
		"MSH|^~\\&|E|HOSP|L|H|1||ADT^A01|C6|P|2.5.1\rPV1|1|I|4W\r",
		"MSH|^~\\&|E| HOSP|L|H|1||ADT^A01|C7|P|2.5.1\rPV1|1|I|4W\\T\\B\r", // leading blanks are data
	} {
		if routed(msg) {
			t.Errorf("%q: routed; want it unrouted", msg)
		}
	}
}

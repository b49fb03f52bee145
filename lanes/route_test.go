package lanes_test

import (
	"testing"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/lanes"
)

func routeOne(t *testing.T, laneKey, msg string) string {
	t.Helper()
	cfg, err := config.Parse([]byte(`
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
`), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := lanes.NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
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
	} {
		if a, b := routeOne(t, tc.key, msh+tc.a), routeOne(t, tc.key, msh+tc.b); a == b {
			t.Errorf("%s: two patients in one lane: %q", tc.key, a)
		}
	}
}

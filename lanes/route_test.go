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

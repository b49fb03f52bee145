package hl7

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Path
		str  string // String(), when it differs from in
	}{
		{"PID-3", Path{Segment: "PID", Occurrence: 1, Field: 3, Repetition: 1}, ""},
		{"PID-3.1", Path{Segment: "PID", Occurrence: 1, Field: 3, Repetition: 1, Component: 1}, ""},
		{"PID-3.4.2", Path{Segment: "PID", Occurrence: 1, Field: 3, Repetition: 1, Component: 4, Subcomponent: 2}, ""},
		{"OBX[2]-5", Path{Segment: "OBX", Occurrence: 2, Field: 5, Repetition: 1}, ""},
		{"PID-3[2].1", Path{Segment: "PID", Occurrence: 1, Field: 3, Repetition: 2, Component: 1}, ""},
		{"OBX[10]-5[3].2.1", Path{Segment: "OBX", Occurrence: 10, Field: 5, Repetition: 3, Component: 2, Subcomponent: 1}, ""},
		{"PID[1]-3[1]", Path{Segment: "PID", Occurrence: 1, Field: 3, Repetition: 1}, "PID-3"},
		{"MSH-1", Path{Segment: "MSH", Occurrence: 1, Field: 1, Repetition: 1}, ""},
		{"MSH-9.2", Path{Segment: "MSH", Occurrence: 1, Field: 9, Repetition: 1, Component: 2}, ""},
		{"PV1-44", Path{Segment: "PV1", Occurrence: 1, Field: 44, Repetition: 1}, ""},
		{"ZPI-1", Path{Segment: "ZPI", Occurrence: 1, Field: 1, Repetition: 1}, ""},
		{"PID-03", Path{Segment: "PID", Occurrence: 1, Field: 3, Repetition: 1}, "PID-3"},
		{"PID-9999", Path{Segment: "PID", Occurrence: 1, Field: 9999, Repetition: 1}, ""},
	}
	for _, tt := range tests {
		p, err := ParsePath(tt.in)
		if err != nil {
			t.Errorf("ParsePath(%q): %v", tt.in, err)
			continue
		}
		if p != tt.want {
			t.Errorf("ParsePath(%q) = %+v, want %+v", tt.in, p, tt.want)
		}
		str := tt.str
		if str == "" {
			str = tt.in
		}
		if p.String() != str {
			t.Errorf("ParsePath(%q).String() = %q, want %q", tt.in, p.String(), str)
		}
		if back, err := ParsePath(p.String()); err != nil || back != p {
			t.Errorf("ParsePath(%q) = %+v, %v: String does not round-trip", p.String(), back, err)
		}
	}
}

func TestParsePathErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"":                         "want SEG-F, SEG-F.C or SEG-F.C.S",
		"PI":                       "want SEG-F",
		"PID":                      `no field: want PID-F, e.g. PID-3`,
		"pid-3":                    `segment "pid" must be three upper-case letters or digits`,
		"1ID-3":                    `segment "1ID"`,
		"P-D-3":                    `segment "P-D"`,
		"PID.3.1":                  `want '-' and a field number after "PID", found "."`,
		"PID3":                     `want '-' and a field number after "PID", found "3"`,
		"PID-":                     "field number missing at the end",
		"PID-x":                    `want a field number, found "x"`,
		"PID-0":                    "field numbers start at 1",
		"PID-3.0":                  "component numbers start at 1",
		"PID-3.1.0":                "subcomponent numbers start at 1",
		"PID[0]-3":                 "segment occurrence numbers start at 1",
		"PID-3[0]":                 "repetition numbers start at 1",
		"PID-10000":                "field number 10000 is too large (at most 9999)",
		"PID-99999999999999999999": "too large",
		"PID-3.":                   "component number missing at the end",
		"PID-3.1.":                 "subcomponent number missing at the end",
		"PID-3.1.2.3":              `unexpected ".3" after "PID-3.1.2"`,
		"PID-3 ":                   `unexpected " " after "PID-3"`,
		" PID-3":                   `segment " PI"`,
		"PID[2-3":                  "missing ] after the segment occurrence number",
		"PID-3[2.1":                "missing ] after the repetition number",
		"PID[]-3":                  `want a segment occurrence number, found "]"`,
		"PID-3.1[2]":               `unexpected "[2]" after "PID-3.1"`,
		"PID--3":                   `want a field number, found "-"`,
		"PID-+3":                   `want a field number, found "+"`,
		"PID-3.-1":                 `want a component number, found "-"`,
	}
	for in, says := range tests {
		_, err := ParsePath(in)
		if !errors.Is(err, ErrBadPath) {
			t.Errorf("ParsePath(%q) error = %v, want ErrBadPath", in, err)
			continue
		}
		if !strings.Contains(err.Error(), says) {
			t.Errorf("ParsePath(%q) error %q does not say %q", in, err, says)
		}
		if !strings.Contains(err.Error(), `"`+in+`"`) && in != "PID-99999999999999999999" {
			t.Errorf("ParsePath(%q) error %q does not name the path", in, err)
		}
	}
}

func TestMustParsePath(t *testing.T) {
	t.Parallel()
	if p := MustParsePath("PID-3.1"); p.Component != 1 {
		t.Fatal(p)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MustParsePath of a bad path did not panic")
		}
	}()
	MustParsePath("bad")
}

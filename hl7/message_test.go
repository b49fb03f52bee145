package hl7

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
)

func mustRead(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustParse(t testing.TB, b []byte) *Message {
	t.Helper()
	m, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return m
}

// checkFields asserts m's value at each path.
func checkFields(t *testing.T, m *Message, want map[string]string) {
	t.Helper()
	for path, w := range want {
		got, err := m.Field(path)
		if err != nil {
			t.Errorf("Field(%q): %v", path, err)
			continue
		}
		if got != w {
			t.Errorf("Field(%q) = %q, want %q", path, got, w)
		}
	}
}

func TestParseADT(t *testing.T) {
	t.Parallel()
	raw := mustRead(t, "adt_a01.hl7")
	m := mustParse(t, raw)

	if !bytes.Equal(m.Raw(), raw) || &m.Raw()[0] != &raw[0] {
		t.Error("Raw() must be the parsed bytes, untouched")
	}
	if m.Separators() != DefaultSeparators {
		t.Errorf("Separators() = %+v", m.Separators())
	}
	if got := m.ControlID(); got != "MSG00001" {
		t.Errorf("ControlID() = %q", got)
	}
	if got := m.MessageType(); got != "ADT^A01^ADT_A01" {
		t.Errorf("MessageType() = %q", got)
	}
	if got := m.Version(); got != "2.5.1" {
		t.Errorf("Version() = %q", got)
	}
	if m.AcceptAckType() != "AL" || m.AppAckType() != "NE" {
		t.Errorf("AcceptAckType, AppAckType = %q, %q", m.AcceptAckType(), m.AppAckType())
	}
	checkFields(t, m, map[string]string{
		"MSH-1":      "|",
		"MSH-2":      `^~\&`,
		"MSH-2.1":    `^~\&`, // MSH-2 is never split
		"MSH-2.2":    "",
		"MSH-2.1.1":  `^~\&`,
		"MSH-2.1.2":  "",
		"MSH-1.1.2":  "",
		"MSH-1[2]":   "",
		"MSH-3":      "EPICADT",
		"MSH-4":      "GOODHEALTH^1.2.840.114350^ISO",
		"MSH-4.2":    "1.2.840.114350",
		"MSH-4.3":    "ISO",
		"MSH-4.4":    "",
		"MSH-7":      "20240115083015-0500",
		"MSH-8":      "",
		"MSH-9.1":    "ADT",
		"MSH-9.2":    "A01",
		"MSH-9.3":    "ADT_A01",
		"MSH-10":     "MSG00001",
		"MSH-11":     "P",
		"MSH-17":     "",
		"MSH[2]-3":   "",
		"EVN-1":      "A01",
		"EVN-5":      "JSMITH^Smith^John^^^^^^GOODHEALTH",
		"EVN-5.9":    "GOODHEALTH",
		"PID-3":      "123456^^^GOODHEALTH^MR", // the first repetition, raw
		"PID-3.1":    "123456",
		"PID-3.4":    "GOODHEALTH",
		"PID-3[2]":   "987-65-4320^^^USSSA^SS",
		"PID-3[2].5": "SS",
		"PID-3[3]":   "",
		"PID-5":      "DOE^JANE^Q^^^^L",
		"PID-5[2].1": "ROE",
		"PID-7":      "19800101",
		"PID-11.2":   `APT 4\S\B`, // raw: escapes are not decoded
		"PID-18":     "ACC1001^^^GOODHEALTH^AN",
		"PID-99":     "",
		"PID[2]-3":   "",
		"PV1-3":      "2000^2012^01^GOODHEALTH",
		"PV1-3.3":    "01",
		"PV1-7.1":    "004777",
		"AL1-3.2":    "PENICILLIN",
		"AL1[2]-3.2": "ASPIRIN",
		"AL1[2]-3.3": "",
		"AL1[3]-3":   "",
		"DG1-3.1":    "I10",
		"ZZZ-1":      "",
	})
}

func TestParseORU(t *testing.T) {
	t.Parallel()
	m := mustParse(t, mustRead(t, "oru_r01.hl7"))
	if m.MessageType() != "ORU^R01" || m.ControlID() != "LAB7788" || m.Version() != "2.3" {
		t.Errorf("MSH: type %q, control %q, version %q", m.MessageType(), m.ControlID(), m.Version())
	}
	checkFields(t, m, map[string]string{
		"OBR-4.2":    "Comprehensive metabolic panel",
		"OBX-3.1":    "2345-7",
		"OBX-5":      "105",
		"OBX[2]-3.2": "Creatinine",
		"OBX[2]-5":   "0.9",
		"OBX[3]-5":   `Fasting 12h\.br\Repeat in 3 months \T\ call patient`,
		"OBX[4]-5":   "",
		"NTE-3":      "Specimen received 09:05",
	})
	if m.AcceptAckType() != "" || m.AppAckType() != "" {
		t.Error("a v2.3 message without MSH-15/16 has empty ack types")
	}
}

func TestParseV27TruncationCharacter(t *testing.T) {
	t.Parallel()
	m := mustParse(t, mustRead(t, "adt_a08_v27.hl7"))
	want := Separators{Field: '|', Component: '^', Repetition: '~', Escape: '\\', Subcomponent: '&', Truncation: '#'}
	if m.Separators() != want {
		t.Fatalf("Separators() = %+v, want %+v", m.Separators(), want)
	}
	if got := m.Separators().EncodingCharacters(); got != `^~\&#` {
		t.Errorf("EncodingCharacters() = %q", got)
	}
	if m.Version() != "2.7" {
		t.Errorf("Version() = %q, want MSH-12.1 only", m.Version())
	}
	checkFields(t, m, map[string]string{
		"MSH-2":      `^~\&#`,
		"MSH-12":     "2.7^DEU&&ISO3166",
		"MSH-12.2":   "DEU&&ISO3166",
		"MSH-12.2.1": "DEU",
		"MSH-12.2.2": "",
		"MSH-12.2.3": "ISO3166",
		"MSH-12.2.4": "",
		"MSH-16":     "AL",
		"PID-5.2":    "MAX",
	})
}

func TestParseLineEndings(t *testing.T) {
	t.Parallel()
	cr := string(mustRead(t, "adt_a01.hl7"))
	variants := map[string]string{
		"CR":                  cr,
		"LF":                  strings.ReplaceAll(cr, "\r", "\n"),
		"CRLF":                strings.ReplaceAll(cr, "\r", "\r\n"),
		"no final terminator": strings.TrimSuffix(cr, "\r"),
		"blank lines":         "\r\n" + strings.ReplaceAll(cr, "\r", "\r\n\n") + "\n\n",
	}
	for name, in := range variants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := mustParse(t, []byte(in))
			if m.Raw() == nil || string(m.Raw()) != in {
				t.Fatal("Raw() changed")
			}
			checkFields(t, m, map[string]string{
				"MSH-10":     "MSG00001",
				"PID-3.1":    "123456",
				"AL1[2]-3.2": "ASPIRIN",
				"DG1-6":      "A", // the last field of the last segment
				"PV1-44":     "20240115083000",
			})
		})
	}
}

func TestParseCustomSeparators(t *testing.T) {
	t.Parallel()
	m := mustParse(t, []byte("MSH#$*@%#APP$NS#FAC#R#RF#2024##ORU$R01#CTL#P#2.4\rPID#1##ID1$$$AUTH*ID2$$$OTHER##NAME$GIVEN%SUB\rOBX#1#ST###a|b^c~d\r"))
	want := Separators{Field: '#', Component: '$', Repetition: '*', Escape: '@', Subcomponent: '%'}
	if m.Separators() != want {
		t.Fatalf("Separators() = %+v", m.Separators())
	}
	checkFields(t, m, map[string]string{
		"MSH-1":      "#",
		"MSH-2":      "$*@%",
		"MSH-3":      "APP$NS",
		"MSH-3.2":    "NS",
		"MSH-9.2":    "R01",
		"MSH-10":     "CTL",
		"PID-3":      "ID1$$$AUTH",
		"PID-3[2].4": "OTHER",
		"PID-5.2":    "GIVEN%SUB",
		"PID-5.2.2":  "SUB",
		"OBX-5":      "a|b^c~d", // the usual delimiters are plain data here
	})
}

func TestParseSegmentMatching(t *testing.T) {
	t.Parallel()
	m := mustParse(t, []byte("MSH|^~\\&|A\rPIDX|wrong\rPID\rPID|second\rZPI|z1|z2\r"))
	checkFields(t, m, map[string]string{
		"PID-1":    "",       // the first PID has no fields
		"PID[2]-1": "second", // PIDX is not a PID
		"PID[3]-1": "",
		"ZPI-2":    "z2",
	})
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		target   error
		says     string
	}{
		{"empty", "", ErrNoMSH, "empty"},
		{"only line breaks", "\r\n\r", ErrNoMSH, "empty"},
		{"PID first", "PID|1||123\rMSH|^~\\&|A\r", ErrNoMSH, `starts with "PID"`},
		{"batch header", "FHS|^~\\&\rBHS|^~\\&\rMSH|^~\\&\r", ErrNoMSH, `"FHS"`},
		{"lower-case msh", "msh|^~\\&|A\r", ErrNoMSH, `"msh"`},
		{"MSH only", "MSH\rPID|1", ErrBadSeparators, "ends before its field separator"},
		{"no encoding characters", "MSH||A|B", ErrBadSeparators, "MSH-2 has 0 encoding characters"},
		{"one encoding character", "MSH|^|A", ErrBadSeparators, "MSH-2 has 1 encoding characters, want 4"},
		{"six encoding characters", "MSH|^~\\&#!|A", ErrBadSeparators, "MSH-2 has 6 encoding characters"},
		{"duplicate", "MSH|^^\\&|A", ErrBadSeparators, `repetition separator (MSH-2.2) '^' is also the component separator (MSH-2.1)`},
		{"duplicate truncation", "MSH|^~\\&^|A", ErrBadSeparators, "truncation character (MSH-2.5) '^' is also the component separator"},
		{"alphanumeric field separator", "MSHA^~\\&A", ErrBadSeparators, `field separator (MSH-1) 'A' is alphanumeric`},
		{"digit encoding character", "MSH|^~1&|A", ErrBadSeparators, `escape character (MSH-2.3) '1' is alphanumeric`},
		{"lower-case field separator", "MSHx^~\\&x", ErrBadSeparators, `field separator (MSH-1) 'x' is alphanumeric`},
		{"lower-case encoding character", "MSH|^z\\&|A", ErrBadSeparators, `repetition separator (MSH-2.2) 'z' is alphanumeric`},
		{"unit separator", "MSH|^~\\\x1f|A", ErrBadSeparators, "subcomponent separator (MSH-2.4) is the control character 0x1f"},
		{"DEL", "MSH\x7f^~\\&\x7fA", ErrBadSeparators, "field separator (MSH-1) is the control character 0x7f"},
		{"space", "MSH|^ \\&|A", ErrBadSeparators, "repetition separator (MSH-2.2) is a space"},
		{"tab", "MSH|^~\\\t|A", ErrBadSeparators, "subcomponent separator (MSH-2.4) is the control character 0x09"},
		{"non-ASCII", "MSH\xa6^~\\&\xa6A", ErrBadSeparators, "non-ASCII byte 0xa6"},
		{"line break in MSH-2", "MSH|^\r~\\&|A", ErrBadSeparators, "MSH-2 has 1 encoding characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := Parse([]byte(tt.in))
			if m != nil || !errors.Is(err, tt.target) {
				t.Fatalf("Parse = %v, %v; want an error wrapping %v", m, err, tt.target)
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("error %q does not say %q", err, tt.says)
			}
		})
	}
}

func TestParseErrorDoesNotQuotePayload(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("PATIENT SECRET NAME DOE^JANE"))
	if err == nil || strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "DOE") {
		t.Fatalf("error %v quotes the payload", err)
	}
}

func TestFieldBadPath(t *testing.T) {
	t.Parallel()
	m := mustParse(t, mustRead(t, "adt_a01.hl7"))
	if _, err := m.Field("PID.3"); !errors.Is(err, ErrBadPath) {
		t.Fatalf("Field(PID.3) error = %v, want ErrBadPath", err)
	}
}

func TestGetZeroPath(t *testing.T) {
	t.Parallel()
	m := mustParse(t, mustRead(t, "adt_a01.hl7"))
	// A hand-built Path with zero Occurrence and Repetition means the first.
	if got := m.Get(Path{Segment: "PID", Field: 3, Component: 1}); got != "123456" {
		t.Errorf("Get = %q", got)
	}
	for _, p := range []Path{{}, {Segment: "PID"}, {Segment: "PID", Field: -1}, {Segment: "PIDX", Field: 1}} {
		if got := m.Get(p); got != "" {
			t.Errorf("Get(%+v) = %q, want empty", p, got)
		}
	}
}

// HL7 v2 (v2.3 Figure 2-1, v2.5 Table 2-1, "Delimiter values") lets a
// message omit the subcomponent separator when it has no subcomponents,
// and the escape character too when it uses no escape sequence: MSH-2 of
// "^~\" or "^~" is conformant. Such a message is parsed, read and
// acknowledged with its own encoding characters; '&' (and '\' without an
// escape character) is plain data in it.
func TestParseOmittedEncodingCharacters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, enc string
		sep       Separators
		pid3      string // PID-3 raw
	}{
		{"no subcomponent separator", `^~\`, Separators{Field: '|', Component: '^', Repetition: '~', Escape: '\\'}, `A&B\S\1^^^H&X`},
		{"no escape character", "^~", Separators{Field: '|', Component: '^', Repetition: '~'}, `A&B\S\1^^^H&X`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := "MSH|" + tc.enc + "|APP|FAC|RAPP|RFAC|20260101||ADT^A01^ADT_A01|CTL-9|P|2.3.1\rPID|1||" + tc.pid3 + "~OTHER\r"
			m, err := Parse([]byte(raw))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if m.Separators() != tc.sep || m.Separators().EncodingCharacters() != tc.enc {
				t.Fatalf("Separators() = %+v (%q), want %+v", m.Separators(), m.Separators().EncodingCharacters(), tc.sep)
			}
			checkFields(t, m, map[string]string{
				"MSH-2":      tc.enc,
				"PID-3":      tc.pid3,
				"PID-3.1":    `A&B\S\1`,
				"PID-3.1.1":  `A&B\S\1`, // no subcomponents: the whole component
				"PID-3.1.2":  "",
				"PID-3.4":    "H&X",
				"PID-3[2].1": "OTHER",
			})
			wantKey := `A&B^1` // \S\ decoded
			if tc.sep.Escape == 0 {
				wantKey = `A&B\S\1` // no escape character: a '\' is data
			}
			if got := Unescape(m.Get(MustParsePath("PID-3.1")), m.Separators()); got != wantKey {
				t.Errorf("Unescape(PID-3.1) = %q, want %q", got, wantKey)
			}
			if got := Unescape(`x\T\y`, m.Separators()); tc.sep.Escape != 0 && got != `x\T\y` {
				t.Errorf(`Unescape(x\T\y) = %q: \T\ has no subcomponent separator to stand for`, got)
			}
			for _, v := range []string{"2.3.1", "2.5"} {
				m := mustParse(t, []byte(strings.Replace(raw, "|2.3.1\r", "|"+v+"\r", 1)))
				ack := Ack(m, AE, `reason with | ^ ~ \ & in it`)
				if bytes.IndexByte(ack, 0) >= 0 {
					t.Fatalf("v%s: ACK holds a NUL byte: %q", v, ack)
				}
				am, err := Parse(ack)
				if err != nil {
					t.Fatalf("v%s: the ACK does not parse: %v\n%q", v, err, ack)
				}
				if am.Separators() != tc.sep {
					t.Errorf("v%s: ACK separators %+v, want the message's %+v", v, am.Separators(), tc.sep)
				}
				a, err := ParseAck(ack)
				if err != nil || a.Code != AE || a.ControlID != "CTL-9" || a.ErrorCode != "207" {
					t.Errorf("v%s: ACK read back %+v, %v\n%q", v, a, err, ack)
				}
				if am.segmentCount() != 3 || am.Get(MustParsePath("MSA-3")) == "" {
					t.Errorf("v%s: want MSH, MSA with its text, ERR: %q", v, ack)
				}
			}
		})
	}
}

// A second MSH in one payload is a second message glued to the first: it
// was taken as one, routed and delivered whole in the first one's lane.
// Parse refuses it as a segment sequence error (100); an MSH-like segment
// ID that is not MSH with the message's field separator is no MSH.
func TestASecondMSHIsASecondMessage(t *testing.T) {
	first := "MSH|^~\\&|A|B|C|D|20260101||ADT^A01|C1|P|2.5\rPID|1||P1\r"
	_, err := Parse([]byte(first + "MSH|^~\\&|A|B|C|D|20260101||ADT^A01|C2|P|2.5\rPID|1||P2\r"))
	if !errors.Is(err, ErrSecondMSH) || ConditionOf(err) != CondSegmentSequence || !strings.Contains(err.Error(), "segment 3") {
		t.Fatalf("two messages in one: %v (condition %v); want ErrSecondMSH at segment 3, condition 100", err, ConditionOf(err))
	}
	for _, ok := range []string{first + "MSHX|1\r", first + "MSH\r", first + "NTE|1||MSH|x\r"} {
		if _, err := Parse([]byte(ok)); err != nil {
			t.Errorf("Parse(%q): %v; want it taken", ok, err)
		}
	}
}

// The header of a payload refused for a second MSH is its first segment,
// whole: ParseHeader reads it, for the ACK that header asks for (AckCondition
// swaps its MSH-3..6 and keeps its version), and refuses no more than Parse
// does of a first segment.
func TestParseHeaderReadsTheFirstMessagesHeader(t *testing.T) {
	first := "MSH|^~\\&|A|B|C|D|20260101||ADT^A01|C1|P|2.3|||AL\rPID|1||P1\r"
	glued := []byte(first + "MSH|^~\\&|A|B|C|D|20260101||ADT^A01|C2|P|2.5\rPID|1||P2\r")
	h, err := ParseHeader(glued)
	if err != nil {
		t.Fatal(err)
	}
	if h.ControlID() != "C1" || h.Version() != "2.3" || h.AcceptAckType() != "AL" || h.segment("PID", 1) != nil {
		t.Fatalf("header %q: control ID %q, version %q, MSH-15 %q; want C1, 2.3, AL and the MSH alone", h.Raw(), h.ControlID(), h.Version(), h.AcceptAckType())
	}
	ack, err := Parse(AckCondition(h, AcceptCode(h, Reject), CondSegmentSequence, "two messages"))
	if err != nil {
		t.Fatal(err)
	}
	if got := ack.Get(MustParsePath("MSH-3")) + ack.Get(MustParsePath("MSH-5")) + ack.Get(MustParsePath("MSH-12")) + ack.Get(MustParsePath("MSA-1")); got != "CA2.3CR" {
		t.Fatalf("ACK to the header: MSH-3, MSH-5, MSH-12, MSA-1 %q; want C, A, 2.3, CR", got)
	}
	for _, bad := range []string{"", "\r\n", "PID|1||P1\rMSH|^~\\&|A\r", "MSH|^\rPID|1\r"} {
		if _, err := ParseHeader([]byte(bad)); !errors.Is(err, ErrNoMSH) && !errors.Is(err, ErrBadSeparators) {
			t.Errorf("ParseHeader(%q): %v; want ErrNoMSH or ErrBadSeparators", bad, err)
		}
	}
}

// BenchmarkParseAndRoute is the parsing work of an ingest: Parse, then the
// fields a route and the ACK read (go test -bench ParseAndRoute ./hl7/).
func BenchmarkParseAndRoute(b *testing.B) {
	raw, err := os.ReadFile("testdata/adt_a01.hl7")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m, err := Parse(raw)
		if err != nil {
			b.Fatal(err)
		}
		_ = m.ControlID()
		_ = m.Get(Path{Segment: "MSH", Field: 9, Component: 1})
		_ = m.Get(Path{Segment: "PID", Field: 3, Component: 1})
		_ = Ack(m, AA, "")
	}
}

// segmentCount returns how many non-empty segments the message has.
func (m *Message) segmentCount() int {
	n := 0
	for seg, rest := nextSegment(m.raw); seg != nil; seg, rest = nextSegment(rest) {
		n++
	}
	return n
}

// Parse indexes nothing: a frame within max_message_bytes made of one-byte
// segments made it allocate a 24-byte slice header a segment, 12 times the
// frame, held while the message was stored and acknowledged (62 times
// allocated in all as the index grew), where max_message_bytes ×
// max_connections is the operator's budget. Its segments are still found.
func TestParseAllocatesNoIndexOfSegments(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("MSH|^~\\&|A|B|C|D|20240101000000||ADT^A01|C1|P|2.5\r")
	for b.Len() < 1<<20-40 {
		b.WriteString("Z\r")
	}
	b.WriteString("PID|1||P1\r")
	payload := b.Bytes()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := Parse(payload)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 64<<10 {
		t.Fatalf("Parse of a %d-byte message of %d segments allocated %d bytes", len(payload), m.segmentCount(), allocated)
	}
	if got := m.Get(MustParsePath("PID-3")); got != "P1" {
		t.Fatalf("PID-3 of the last segment: %q", got)
	}
}

// lfOnlyFrame is a 1 MiB message whose segments end in LF alone, one-byte
// segments between its MSH and its last segment, a PID.
func lfOnlyFrame() []byte {
	var b bytes.Buffer
	b.WriteString("MSH|^~\\&|A|B|C|D|20240101000000||ADT^A01|C1|P|2.5\n")
	for b.Len() < 1<<20-40 {
		b.WriteString("Z\n")
	}
	b.WriteString("PID|1||P1\n")
	return b.Bytes()
}

// A message whose segments end in LF alone is read as one ending in CR: its
// last segment is found (each segment once cost a search of the whole rest
// of the message for a CR: see BenchmarkParseLFOnlyFrame).
func TestALargeMessageWithLFOnlySegmentsParses(t *testing.T) {
	m, err := Parse(lfOnlyFrame())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Get(MustParsePath("PID-3")); got != "P1" || m.ControlID() != "C1" {
		t.Fatalf("PID-3 %q, control id %q; want P1, C1", got, m.ControlID())
	}
}

// BenchmarkParseLFOnlyFrame parses a 1 MiB frame of one-byte LF-ended
// segments and reads its last segment's field.
func BenchmarkParseLFOnlyFrame(b *testing.B) {
	frame := lfOnlyFrame()
	for b.Loop() {
		m, err := Parse(frame)
		if err != nil || m.Get(MustParsePath("PID-3")) != "P1" {
			b.Fatal(err)
		}
	}
}

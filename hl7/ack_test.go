package hl7

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// controlIDPattern matches NewControlID's IDs.
var controlIDPattern = regexp.MustCompile(`^MF[0-9A-F]{18}$`)

// withClock runs f with the ACK clock fixed. Not for parallel tests.
func withClock(t *testing.T, at time.Time, f func()) {
	t.Helper()
	saved := now
	now = func() time.Time { return at }
	defer func() { now = saved }()
	f()
}

// maskControlID replaces the ACK's MSH-10 with CTRL, after checking it.
func maskControlID(t *testing.T, ack []byte) string {
	t.Helper()
	m := mustParse(t, ack)
	id := m.ControlID()
	if !controlIDPattern.MatchString(id) {
		t.Fatalf("ACK control ID %q does not look like NewControlID's", id)
	}
	return strings.Replace(string(ack), id, "CTRL", 1)
}

// TestAckGolden pins the exact bytes of ACKs in each layout.
func TestAckGolden(t *testing.T) {
	at := time.Date(2024, 1, 15, 8, 30, 20, 0, time.FixedZone("EST", -5*3600))
	tests := []struct {
		name   string
		msg    string // testdata file
		code   AckCode
		reason string
		want   string
	}{
		{"v2.5.1 enhanced accept", "adt_a01.hl7", CA, "",
			"MSH|^~\\&|LABSYS|CENTRALLAB|EPICADT|GOODHEALTH^1.2.840.114350^ISO|20240115083020-0500||ACK^A01^ACK|CTRL|P|2.5.1\r" +
				"MSA|CA|MSG00001\r"},
		{"v2.5.1 commit error", "adt_a01.hl7", CE, "store failed: disk full",
			"MSH|^~\\&|LABSYS|CENTRALLAB|EPICADT|GOODHEALTH^1.2.840.114350^ISO|20240115083020-0500||ACK^A01^ACK|CTRL|P|2.5.1\r" +
				"MSA|CE|MSG00001|store failed: disk full\r" +
				"ERR|||207^Application internal error^HL70357|E||||store failed: disk full\r"},
		{"v2.3 before 2.3.1 and 2.5", "oru_r01.hl7", AE, "store failed",
			"MSH|^~\\&|EPICADT|GOODHEALTH|LABSYS|CENTRALLAB|20240115083020-0500||ACK^R01|CTRL|P|2.3\r" +
				"MSA|AE|LAB7788|store failed\r" +
				"ERR|^^^207&store failed&HL70357\r"},
		{"v2.7 withdraws MSA-3", "adt_a08_v27.hl7", CR, "no #1 | bad",
			"MSH|^~\\&#|RECVAPP|RECVFAC|SENDAPP|SENDFAC|20240115083020-0500||ACK^A08^ACK|CTRL|T|2.7^DEU&&ISO3166\r" +
				"MSA|CR|C27-1\r" +
				"ERR|||207^Application internal error^HL70357|E||||no \\P\\1 \\F\\ bad\r"},
		{"accept with a note", "adt_a01.hl7", AA, "no route matched",
			"MSH|^~\\&|LABSYS|CENTRALLAB|EPICADT|GOODHEALTH^1.2.840.114350^ISO|20240115083020-0500||ACK^A01^ACK|CTRL|P|2.5.1\r" +
				"MSA|AA|MSG00001|no route matched\r" +
				"ERR|||0^Message accepted^HL70357|I||||no route matched\r"},
	}
	withClock(t, at, func() {
		for _, tt := range tests {
			m := mustParse(t, mustRead(t, tt.msg))
			got := maskControlID(t, Ack(m, tt.code, tt.reason))
			if got != tt.want {
				t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
			}
		}
		got := maskControlID(t, NakUnparsable("no MSH segment"))
		want := "MSH|^~\\&|MF||||20240115083020-0500||ACK|CTRL|P|2.5\r" +
			"MSA|AR||no MSH segment\r" +
			"ERR|||100^Segment sequence error^HL70357|E||||no MSH segment\r"
		if got != want {
			t.Errorf("NakUnparsable:\n got %q\nwant %q", got, want)
		}
	})
}

func TestAckFields(t *testing.T) {
	t.Parallel()
	m := mustParse(t, mustRead(t, "adt_a01.hl7"))
	ack := Ack(m, AcceptCode(m, Accept), "")
	a := mustParse(t, ack)
	if a.Separators() != m.Separators() {
		t.Errorf("separators %+v, want the message's", a.Separators())
	}
	checkFields(t, a, map[string]string{
		"MSH-3":   "LABSYS",
		"MSH-4":   "CENTRALLAB",
		"MSH-5":   "EPICADT",
		"MSH-6.2": "1.2.840.114350",
		"MSH-9":   "ACK^A01^ACK",
		"MSH-11":  "P",
		"MSH-12":  "2.5.1",
		"MSH-15":  "",
		"MSA-1":   "CA",
		"MSA-2":   "MSG00001",
		"MSA-3":   "",
		"ERR-1":   "",
	})
	if a.ControlID() == m.ControlID() {
		t.Error("the ACK must have a control ID of its own")
	}
	ts, err := time.Parse("20060102150405-0700", a.Get(Path{Segment: "MSH", Field: 7}))
	if err != nil || time.Since(ts).Abs() > time.Minute {
		t.Errorf("MSH-7 %q, %v: want the current time", a.Get(Path{Segment: "MSH", Field: 7}), err)
	}
	// Nothing of the message beyond MSH and its control ID.
	for _, secret := range []string{"DOE", "123456", "PENICILLIN", "MAIN ST", "PID", "ADT_A01"} {
		if strings.Contains(string(ack), secret) {
			t.Errorf("the ACK carries %q from the message", secret)
		}
	}
	if n := strings.Count(string(ack), "\r"); n != 2 {
		t.Errorf("%d segments, want MSH and MSA", n)
	}
}

// An ACK to a message that declares its character set (MSH-18) declares the
// same: the MSH-3..6 it copies raw are encoded in it. Without MSH-18 the
// reader of the ACK would take them for ASCII (HL7's default).
func TestAckDeclaresTheMessagesCharacterSet(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, msg, charset, sendApp string }{
		{"Latin-1", "MSH|^~\\&|Z\xfcRICH|B|C|D|20260101||ADT^A01|C1|P|2.5|||AL|NE||8859/1\rPID|1||P1\r", "8859/1", "Z\xfcRICH"},
		{"UTF-8", "MSH|^~\\&|Z\xc3\xbcRICH|B|C|D|20260101||ADT^A01|C2|P|2.5.1||||||UNICODE UTF-8|EN\r", "UNICODE UTF-8", "Z\xc3\xbcRICH"},
		{"code extensions", "MSH|^~\\&|A|B|C|D|20260101||ADT^A01|C3|P|2.5||||||ASCII~ISO IR87||ISO 2022-1994\r", "ASCII~ISO IR87", "A"},
		{"none", "MSH|^~\\&|A|B|C|D|20260101||ADT^A01|C4|P|2.5|||AL|NE\r", "", "A"},
	}
	for _, c := range cases {
		ack := Ack(mustParse(t, []byte(c.msg)), AA, "")
		a := mustParse(t, ack)
		if got, _ := a.field("MSH", 1, 18); string(got) != c.charset { // every repetition
			t.Errorf("%s: ACK MSH-18 %q, want %q (%q)", c.name, got, c.charset, ack)
		}
		if got := a.Get(MustParsePath("MSH-5")); got != c.sendApp {
			t.Errorf("%s: ACK MSH-5 %q, want %q", c.name, got, c.sendApp)
		}
		header, _, _ := strings.Cut(string(ack), "\r")
		wantFields := 12
		if c.charset != "" {
			wantFields = 18
		}
		if n := strings.Count(header, "|") + 1; n != wantFields { // MSH-1 is the first |
			t.Errorf("%s: ACK MSH %q has %d fields, want %d (nothing after MSH-18, MSH-13..17 empty)", c.name, header, n, wantFields)
		}
		for _, f := range []string{"MSH-13", "MSH-14", "MSH-15", "MSH-16", "MSH-17", "MSH-19", "MSH-20"} {
			if v := a.Get(MustParsePath(f)); v != "" {
				t.Errorf("%s: ACK %s %q, want empty", c.name, f, v)
			}
		}
	}
}

func TestAckMessageTypeWithoutTrigger(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"MSH|^~\\&|A|B|C|D|||ACK|1|P|2.5\r":       "ACK",
		"MSH|^~\\&|A|B|C|D||||1|P|2.5\r":          "ACK",
		"MSH|^~\\&|A|B|C|D|||QRY^Q01|1|P|2.2\r":   "ACK^Q01",
		"MSH|^~\\&|A|B|C|D|||ADT^A04|1|P|2.3.1\r": "ACK^A04^ACK",
		"MSH|^~\\&|A|B|C|D|||ADT^A04|1|P\r":       "ACK^A04^ACK",
	} {
		a := mustParse(t, Ack(mustParse(t, []byte(in)), AA, ""))
		if got := a.MessageType(); got != want {
			t.Errorf("ACK to %q: MSH-9 %q, want %q", in, got, want)
		}
	}
}

func TestAckReasonIsEscapedAndBounded(t *testing.T) {
	t.Parallel()
	m := mustParse(t, mustRead(t, "adt_a01.hl7"))
	reason := "bad | field ^ comp ~ rep \\ esc & sub\r\nnext line\x0b\x1c"
	ack := Ack(m, AE, reason)
	if strings.ContainsAny(string(ack), "\n\x0b\x1c") {
		t.Fatalf("ACK %q carries raw control characters", ack)
	}
	a, err := ParseAck(ack)
	if err != nil {
		t.Fatal(err)
	}
	want := "bad | field ^ comp ~ rep \\ esc & sub  next line  "
	if a.ErrorMessage != want {
		t.Errorf("ERR-8 read back %q, want %q", a.ErrorMessage, want)
	}
	if a.Text != want {
		t.Errorf("MSA-3 read back %q, want %q", a.Text, want)
	}

	long := strings.Repeat("é", 600) // 1200 bytes
	a, err = ParseAck(Ack(m, AE, long))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Text) != 80 || len(a.ErrorMessage) != 1000 || !strings.HasPrefix(long, a.Text) || !strings.HasPrefix(long, a.ErrorMessage) {
		t.Errorf("MSA-3 %d bytes, ERR-8 %d bytes: want 80 and 1000, cut between characters", len(a.Text), len(a.ErrorMessage))
	}
}

// TestAckBlockCharactersInCopiedFields: found by FuzzParse
// (testdata/fuzz/FuzzParse/873b474a8096fc68). A raw MSH value holding an
// MLLP block character (possible from a file inbound) once made the ACK
// unframeable; such bytes are now hex-escaped.
func TestAckBlockCharactersInCopiedFields(t *testing.T) {
	t.Parallel()
	m := mustParse(t, []byte("MSH|^~\\&|APP\x1c|FAC|R\x0bAPP|RF|||ADT^A\x1c01|C\x1c1|P|2.5\r"))
	ack := Ack(m, AA, "")
	if _, err := AppendFrame(nil, ack); err != nil {
		t.Fatalf("the ACK cannot be framed: %v", err)
	}
	a := mustParse(t, ack)
	checkFields(t, a, map[string]string{
		"MSH-3":   "R\\X0B\\APP",
		"MSH-5":   "APP\\X1C\\",
		"MSH-9.2": "A\\X1C\\01",
		"MSA-2":   "C\\X1C\\1",
	})
	if got := Unescape(a.Get(MustParsePath("MSA-2")), a.Separators()); got != m.ControlID() {
		t.Errorf("MSA-2 decodes to %q, want %q", got, m.ControlID())
	}
}

func TestAckCondition(t *testing.T) {
	t.Parallel()
	m := mustParse(t, mustRead(t, "adt_a01.hl7"))
	a, err := ParseAck(AckCondition(m, AR, CondRequiredFieldMissing, "PID-3 is empty"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Code != AR || a.ErrorCode != "101" || a.ErrorMessage != "PID-3 is empty" {
		t.Errorf("read back %+v", a)
	}
	am := mustParse(t, AckCondition(m, AR, CondRequiredFieldMissing, "x"))
	if got := am.Get(MustParsePath("ERR-3.2")); got != "Required field missing" {
		t.Errorf("ERR-3.2 = %q", got)
	}
}

func TestAckNilMessage(t *testing.T) {
	t.Parallel()
	a, err := ParseAck(Ack(nil, AE, "listener stopping"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Code != AE || a.ControlID != "" || a.ErrorMessage != "listener stopping" {
		t.Errorf("read back %+v", a)
	}
}

func TestNakUnparsable(t *testing.T) {
	t.Parallel()
	_, perr := Parse([]byte("MSH|^^\\&|x"))
	nak := NakUnparsableCondition(ConditionOf(perr), perr.Error())
	m := mustParse(t, nak)
	checkFields(t, m, map[string]string{"MSH-3": "MF", "MSH-9": "ACK", "MSH-11": "P", "MSH-12": "2.5", "MSA-1": "AR", "MSA-2": "", "ERR-3.1": "102", "ERR-4": "E"})
	a, err := ParseAck(nak)
	if err != nil {
		t.Fatal(err)
	}
	// The reason quotes separator characters: they come back intact.
	if a.ErrorMessage != perr.Error() {
		t.Errorf("ERR-8 read back %q, want %q", a.ErrorMessage, perr.Error())
	}
}

// A message Parse refuses for its encoding characters is answered with its
// control ID when MSH-1 alone finds it and it reads the same under the
// ACK's default separators; never with a guess.
func TestAckUnparsableEchoesTheControlIDOnlyWhenSafe(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, payload, want string }{
		{"MSH-2 too short", "MSH|^|A|B|C|D|20260101||ADT^A01|CTRL6|P|2.5\r", "CTRL6"},
		{"MSH-2 too long", "MSH|^~\\&#!|A|B|C|D|20260101||ADT^A01|C-7.x|P|2.5\rPID|1\r", "C-7.x"},
		{"MSH-2 repeats a separator", "MSH|^^\\&|A|B|C|D|20260101||ADT|X 1|P|2.5", "X 1"},
		{"another field separator", "\r\nMSH#^#A#B#C#D#20260101##ADT^A01#CTRL8#P#2.5\r", "CTRL8"},
		{"MSH-10 the last field", "MSH|^|A|B|C|D|20260101||ADT|CTRL9", "CTRL9"},
		{"no MSH-10", "MSH|^|A|B|C|D|20260101||ADT\rPID|1||CTRL|x|y|z|w|v|u|t\r", ""},
		{"empty MSH-10", "MSH|^|A|B|C|D|20260101||ADT||P|2.5", ""},
		{"MSH-1 alphanumeric", "MSHX^~\\&XAXBXCXDX2026XXADTXCTRLXP", ""},
		{"MSH-1 a space", "MSH ^~\\& A B C D 2026  ADT CTRL P", ""},
		{"no MSH-1", "MSH", ""},
		{"no MSH", "PID|^~|A|B|C|D|20260101||ADT|CTRL|P", ""},
		{"MSH-10 holds a default delimiter", "MSH#^#A#B#C#D#20260101##ADT#CT|RL#P#2.5", ""},
		{"MSH-10 holds a component separator", "MSH|^|A|B|C|D|20260101||ADT|CT^RL|P|2.5", ""},
		{"MSH-10 not ASCII", "MSH|^|A|B|C|D|20260101||ADT|CTR\xc4|P|2.5", ""},
		{"MSH-10 a block character", "MSH|^|A|B|C|D|20260101||ADT|CT\x1cRL|P|2.5", ""},
		{"MSH-10 too long", "MSH|^|A|B|C|D|20260101||ADT|" + strings.Repeat("C", 200) + "|P|2.5", ""},
		{"MSH-10 of 199 characters", "MSH|^|A|B|C|D|20260101||ADT|" + strings.Repeat("C", 199) + "|P|2.5", strings.Repeat("C", 199)},
	}
	for _, c := range cases {
		if _, err := Parse([]byte(c.payload)); err == nil {
			t.Fatalf("%s: Parse accepted %q", c.name, c.payload)
		}
		if got := UnparsableControlID([]byte(c.payload)); got != c.want {
			t.Errorf("%s: UnparsableControlID %q, want %q", c.name, got, c.want)
		}
		a, err := ParseAck(AckUnparsable([]byte(c.payload), AR, CondDataType, "bad separators"))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if a.Code != AR || a.ControlID != c.want || a.ErrorCode != "102" {
			t.Errorf("%s: ACK read back %+v, want AR, MSA-2 %q, 102", c.name, a, c.want)
		}
	}
}

func TestAcceptCodeAndMode(t *testing.T) {
	t.Parallel()
	original := mustParse(t, mustRead(t, "oru_r01.hl7"))
	enhanced := mustParse(t, mustRead(t, "adt_a01.hl7"))
	appOnly := mustParse(t, []byte("MSH|^~\\&|A|B|C|D|||ADT^A01|1|P|2.5||||AL\r"))
	if AckModeEnhanced(original) || !AckModeEnhanced(enhanced) || AckModeEnhanced(appOnly) || AckModeEnhanced(nil) {
		t.Error("AckModeEnhanced must follow MSH-15")
	}
	for _, tt := range []struct {
		m    *Message
		o    Outcome
		want AckCode
	}{
		{original, Accept, AA}, {original, Error, AE}, {original, Reject, AR},
		{enhanced, Accept, CA}, {enhanced, Error, CE}, {enhanced, Reject, CR},
		{nil, Reject, AR},
	} {
		if got := AcceptCode(tt.m, tt.o); got != tt.want {
			t.Errorf("AcceptCode(%v) = %s, want %s", tt.o, got, tt.want)
		}
		if got := tt.want.Outcome(); got != tt.o {
			t.Errorf("%s.Outcome() = %v, want %v", tt.want, got, tt.o)
		}
	}
	if AckCode("XX").Valid() || !CR.Valid() || AckCode("XX").Outcome() != Error {
		t.Error("AckCode validity")
	}
	if Reject.String() != "reject" || Outcome(9).String() != "Outcome(9)" {
		t.Error("Outcome.String")
	}
}

func TestShouldAck(t *testing.T) {
	t.Parallel()
	msg := func(msh15 string) *Message {
		return mustParse(t, []byte("MSH|^~\\&|A|B|C|D|||ADT^A01|1|P|2.5|||"+msh15+"|AL\r"))
	}
	for _, tt := range []struct {
		msh15          string
		accept, reject bool
	}{
		{"", true, true}, {"AL", true, true}, {"NE", false, false}, {"ER", false, true}, {"SU", true, false}, {"??", true, true},
	} {
		m := msh(tt.msh15, msg)
		if got := ShouldAck(m, AcceptCode(m, Accept)); got != tt.accept {
			t.Errorf("MSH-15 %q: ShouldAck(accept) = %v", tt.msh15, got)
		}
		if got := ShouldAck(m, AcceptCode(m, Reject)); got != tt.reject {
			t.Errorf("MSH-15 %q: ShouldAck(reject) = %v", tt.msh15, got)
		}
	}
}

func msh(v string, f func(string) *Message) *Message { return f(v) }

func TestParseAck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want Acknowledgment
		err  error
	}{
		{"AA", "MSH|^~\\&|R|RF|S|SF|20240101||ACK^A01^ACK|9|P|2.5\rMSA|AA|MSG1\r",
			Acknowledgment{Code: AA, ControlID: "MSG1"}, nil},
		{"LF endings", "MSH|^~\\&|R|RF|S|SF|20240101||ACK|9|P|2.5\nMSA|CA|MSG1\n",
			Acknowledgment{Code: CA, ControlID: "MSG1"}, nil},
		{"AE with ERR-8", "MSH|^~\\&|R|RF|S|SF|20240101||ACK|9|P|2.5\rMSA|AE|MSG1|short\rERR|||206^Application record locked^HL70357|E||||record \\T\\ locked\r",
			Acknowledgment{Code: AE, ControlID: "MSG1", Text: "short", ErrorCode: "206", ErrorMessage: "record & locked"}, nil},
		{"ERR-3 text only", "MSH|^~\\&|R|RF|S|SF|20240101||ACK|9|P|2.5\rMSA|AR|MSG1\rERR|||200^Unsupported message type^HL70357|E\r",
			Acknowledgment{Code: AR, ControlID: "MSG1", ErrorCode: "200", ErrorMessage: "Unsupported message type"}, nil},
		{"pre-2.5 ERR-1", "MSH|^~\\&|R|RF|S|SF|20240101||ACK|9|P|2.4\rMSA|AR|MSG1|rejected\rERR|PID^1^3^101&Required field missing&HL70357\r",
			Acknowledgment{Code: AR, ControlID: "MSG1", Text: "rejected", ErrorCode: "101", ErrorMessage: "Required field missing"}, nil},
		{"several ERR", "MSH|^~\\&|R|RF|S|SF|20240101||ACK|9|P|2.5\rMSA|CE|MSG1\rERR|||101|E||||one\rERR|||102|E||||two\r",
			Acknowledgment{Code: CE, ControlID: "MSG1", ErrorCode: "101", ErrorMessage: "one; two"}, nil},
		{"application ACK of another type", "MSH|^~\\&|R|RF|S|SF|20240101||RRI^I12^RRI_I12|9|P|2.5\rMSA|AA|MSG1\rRF1|A\r",
			Acknowledgment{Code: AA, ControlID: "MSG1"}, nil},
		{"no MSA", "MSH|^~\\&|R|RF|S|SF|20240101||ACK|9|P|2.5\r", Acknowledgment{}, ErrNotAck},
		{"bad code", "MSH|^~\\&|R|RF|S|SF|20240101||ACK|9|P|2.5\rMSA|OK|MSG1\r", Acknowledgment{}, ErrNotAck},
		{"empty code", "MSH|^~\\&|R|RF|S|SF|20240101||ACK|9|P|2.5\rMSA||MSG1\r", Acknowledgment{}, ErrNotAck},
		{"not HL7", "HTTP/1.1 400 Bad Request\r\n", Acknowledgment{}, ErrNoMSH},
	}
	for _, tt := range tests {
		got, err := ParseAck([]byte(tt.in))
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("%s: error %v, want %v", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: ParseAck = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

func TestAckRoundTripsEveryCode(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"adt_a01.hl7", "oru_r01.hl7", "adt_a08_v27.hl7"} {
		m := mustParse(t, mustRead(t, file))
		for _, code := range []AckCode{AA, AE, AR, CA, CE, CR} {
			for _, reason := range []string{"", "why ^ not"} {
				a, err := ParseAck(Ack(m, code, reason))
				if err != nil {
					t.Fatalf("%s %s: %v", file, code, err)
				}
				if a.Code != code || a.ControlID != m.ControlID() || a.ErrorMessage != reason {
					t.Errorf("%s %s %q: read back %+v", file, code, reason, a)
				}
			}
		}
	}
}

func TestNewControlID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := NewControlID()
		if !controlIDPattern.MatchString(id) || seen[id] {
			t.Fatalf("control ID %q: malformed or repeated", id)
		}
		seen[id] = true
	}
}

func TestVersionBefore(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		v    string
		want bool // before 2.5
	}{
		{"2.1", true}, {"2.3.1", true}, {"2.4", true}, {"2.5", false}, {"2.5.1", false}, {"2.10", false},
		{"", false}, {"3", false}, {"2.x", false}, {"2.4.1.1", false}, {"-2.4", false}, {"2.-4", false},
	} {
		if got := versionBefore(tt.v, 2, 5, 0); got != tt.want {
			t.Errorf("versionBefore(%q, 2.5) = %v", tt.v, got)
		}
	}
}

func TestConditionOf(t *testing.T) {
	t.Parallel()
	_, noMSH := Parse([]byte("PID|1"))
	_, badSep := Parse([]byte("MSH|^^\\&"))
	_, notFramed := NewFrameReader(strings.NewReader("x"), 10).ReadFrame()
	_, tooLarge := NewFrameReader(strings.NewReader(frame("12345678901")), 10).ReadFrame()
	noControlID := CheckControlID(mustParse(t, []byte("MSH|^~\\&|A|B|C|D|20260101||ADT^A01||P|2.5")))
	for err, want := range map[error]Condition{
		nil: CondAccepted, noMSH: CondSegmentSequence, badSep: CondDataType, noControlID: CondRequiredFieldMissing,
		notFramed: CondSegmentSequence, tooLarge: CondValueTooLong, errors.New("x"): CondInternalError,
	} {
		if got := ConditionOf(err); got != want {
			t.Errorf("ConditionOf(%v) = %d, want %d", err, got, want)
		}
	}
	if CondInternalError.String() != "Application internal error" || Condition(42).String() != "Condition 42" {
		t.Error("Condition.String")
	}
}

// TestAckTimestampNeverSplitsTheHeader: a '+' or '-' delimiter would split
// MSH-7's UTC offset off and shift the ACK's later MSH fields, so the
// offset is left out then (found by FuzzParse: MSH-9.2 read back empty).
func TestAckTimestampNeverSplitsTheHeader(t *testing.T) {
	east := time.Date(2026, 11, 22, 9, 30, 0, 0, time.FixedZone("", 3600))
	west := time.Date(2026, 11, 22, 9, 30, 0, 0, time.FixedZone("", -5*3600))
	for _, c := range []struct {
		name string
		at   time.Time
		msh  string
		ts   string
	}{
		{"plus field separator", east, "MSH+^~\\&+A+B+C+D+++ADT^A04+1+P+2.5\r", "20261122093000"},
		{"minus field separator", west, "MSH-^~\\&-A-B-C-D---ADT^A04-1-P-2.5\r", "20261122093000"},
		{"plus component separator", east, "MSH|+~\\&|A|B|C|D|||ADT+A04|1|P|2.5\r", "20261122093000"},
		{"minus truncation character", west, "MSH|^~\\&-|A|B|C|D|||ADT^A04|1|P|2.5\r", "20261122093000"},
		{"minus, offset positive", east, "MSH-^~\\&-A-B-C-D---ADT^A04-1-P-2.5\r", "20261122093000+0100"},
		{"default separators", west, "MSH|^~\\&|A|B|C|D|||ADT^A04|1|P|2.5\r", "20261122093000-0500"},
	} {
		withClock(t, c.at, func() {
			a := mustParse(t, Ack(mustParse(t, []byte(c.msh)), AA, ""))
			mt := Path{Segment: "MSH", Field: 9}
			if got := a.Get(Path{Segment: "MSH", Field: 7}); got != c.ts {
				t.Errorf("%s: MSH-7 %q, want %q", c.name, got, c.ts)
			}
			if got := a.Get(mt); got != "ACK"+string(a.Separators().Component)+"A04"+string(a.Separators().Component)+"ACK" {
				t.Errorf("%s: MSH-9 %q", c.name, got)
			}
			if got := a.Get(Path{Segment: "MSH", Field: 12}); got != "2.5" {
				t.Errorf("%s: MSH-12 %q, want 2.5", c.name, got)
			}
		})
	}
}

// MSA-2 = MSH-10, whole: a repetition separator in MSH-10 (not conformant
// for an ST, but sent) was cut there, so the ACK echoed "CT" for "CT~RL1",
// a sender matching by MSA-2 did not know its ACK, and the stored control
// id was cut too. ParseAck reads MSA-2 whole likewise, so mf's own sender
// knows a destination's ACK that echoes the field whole.
func TestAControlIDWithARepetitionSeparatorIsEchoedWhole(t *testing.T) {
	m, err := Parse([]byte("MSH|^~\\&|S|SF|R|RF|20240101||ADT^A01|CT~RL1|P|2.5\rPID|1||P1\r"))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.ControlID(); got != "CT~RL1" {
		t.Fatalf("ControlID() = %q, want the whole field %q", got, "CT~RL1")
	}
	ack := Ack(m, AA, "")
	if !bytes.Contains(ack, []byte("MSA|AA|CT~RL1")) {
		t.Fatalf("ACK %q does not echo MSH-10 whole", ack)
	}
	a, err := ParseAck(ack)
	if err != nil || a.ControlID != "CT~RL1" {
		t.Fatalf("ParseAck: %+v, %v; want control id %q", a, err, "CT~RL1")
	}
}

// TestAnExplicitlyNullMSH15IsOriginalMode: HL7 enters the enhanced mode
// only when MSH-15 or MSH-16 is valued; both "null or not present" is the
// original mode, and "" is HL7's null. A sender that writes "" in empty
// fields and reads only AA/AE/AR must not be answered CA.
func TestAnExplicitlyNullMSH15IsOriginalMode(t *testing.T) {
	t.Parallel()
	m := mustParse(t, []byte("MSH|^~\\&|A|B|C|D|||ADT^A01|1|P|2.5|||\"\"|\"\"\r"))
	if got := AcceptCode(m, Accept); got != AA {
		t.Errorf("MSH-15 \"\": AcceptCode(accept) = %s, want AA (original mode)", got)
	}
	if got := m.AcceptAckType(); got != "" {
		t.Errorf("MSH-15 \"\": AcceptAckType() = %q, want \"\" (HL7 null)", got)
	}
	if got := m.AppAckType(); got != "" {
		t.Errorf("MSH-16 \"\": AppAckType() = %q, want \"\" (HL7 null)", got)
	}
	if !ShouldAck(m, AA) || !ShouldAck(m, AR) {
		t.Error("MSH-15 \"\": an original-mode message is always answered")
	}
}

// TestBlankAckTypesAreNoValue: a fixed-width sender pads empty fields with
// blanks. An MSH-15 of blanks is not present (original mode: AA, not CA),
// and "NE " is NE.
func TestBlankAckTypesAreNoValue(t *testing.T) {
	t.Parallel()
	m := mustParse(t, []byte("MSH|^~\\&|A|B|C|D|||ADT^A01|1|P |2.3||| | \r"))
	if got := AcceptCode(m, Accept); got != AA {
		t.Errorf("MSH-15 of a blank: AcceptCode(accept) = %s, want AA (original mode)", got)
	}
	if got := m.ProcessingID(); got != "P" {
		t.Errorf("MSH-11 \"P \": ProcessingID() = %q, want P", got)
	}
	m = mustParse(t, []byte("MSH|^~\\&|A|B|C|D|||ADT^A01|1|P|2.5|||NE |NE \r"))
	if got := m.AcceptAckType(); got != "NE" {
		t.Errorf("MSH-15 \"NE \": AcceptAckType() = %q, want NE", got)
	}
	if ShouldAck(m, CA) {
		t.Error("MSH-15 \"NE \": a sender of NE reads no commit ACK")
	}
}

// TestAnAckToAMessageOfNoReadableVersionKeepsItsTextInMSA3: MSA-3 is left
// out only for a version known to be v2.7 or later, which withdrew it. A
// message whose MSH-12 is empty or unreadable ("2.3 ", "V2.4") may come from
// a sender of any version, and one before v2.5 reads the reason in MSA-3
// alone (its ERR has no user message).
func TestAnAckToAMessageOfNoReadableVersionKeepsItsTextInMSA3(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"", "2.3 ", "V2.4"} {
		m := mustParse(t, []byte("MSH|^~\\&|A|B|C|D|||ADT^A01|C1|P|"+version+"\rPID|1\r"))
		a, err := ParseAck(Ack(m, AE, "message not stored, send it again"))
		if err != nil {
			t.Fatal(err)
		}
		if a.Text != "message not stored, send it again" {
			t.Errorf("MSH-12 %q: MSA-3 %q, want the reason", version, a.Text)
		}
	}
}

// An ACK fills in MSH-11 and MSH-12, which every message must carry, when
// the message it answers left them empty: P and 2.5, as a NAK to input
// without a usable MSH. An ACK without MSH-12 is one that HAPI-based
// senders cannot read; they would send the message again.
func TestAnAckToAMessageWithoutMSH11OrMSH12CarriesDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ msh, procID, version string }{
		{"MSH|^~\\&|S|F|R|RF|2024||ADT^A01|Q3", "P", "2.5"},
		{"MSH|^~\\&|S|F|R|RF|2024||ADT^A01|Q3|| ", "P", "2.5"},
		{"MSH|^~\\&|S|F|R|RF|2024||ADT^A01|Q3||2.3", "P", "2.3"},
		{"MSH|^~\\&|S|F|R|RF|2024||ADT^A01|Q3|T|", "T", "2.5"},
	} {
		m := mustParse(t, []byte(c.msh+"\rPID|1\r"))
		for _, code := range []AckCode{AA, AE, AR} {
			a := mustParse(t, Ack(m, code, "reason"))
			checkFields(t, a, map[string]string{"MSH-11": c.procID, "MSH-12": c.version, "MSA-1": string(code), "MSA-2": "Q3"})
		}
	}
	// "." as the field separator: 2.5 written as it is split MSH-12 in two
	// and pushed MSH-18 along. Escaped, or left out without an escape
	// character.
	for _, c := range []struct{ msh, raw string }{
		{"MSH.^~\\&.S.F.R.RF.2024..ADT^A01.Q3.P.......UNICODE UTF-8", "2\\F\\5"},
		{"MSH.^~.S.F.R.RF.2024..ADT^A01.Q3.P.......UNICODE UTF-8", ""},
	} {
		ack := Ack(mustParse(t, []byte(c.msh+"\rPID.1\r")), AA, "")
		msh := strings.Split(strings.SplitN(string(ack), "\r", 2)[0], ".")
		if len(msh) != 18 || msh[11] != c.raw || msh[17] != "UNICODE UTF-8" {
			t.Errorf("ACK to %q: MSH %q; want MSH-12 %q and MSH-18 UNICODE UTF-8 as the 18th field", c.msh, msh, c.raw)
		}
	}
}

// TestAckLayoutAtEachVersionBoundary pins the version-dependent parts of an
// ACK on both sides of each boundary: MSH-9's third component from v2.3.1,
// ERR-3 instead of ERR-1 from v2.5, no MSA-3 from v2.7. A sender of v2.4
// reads only ERR-1, one of v2.6 still reads MSA-3.
func TestAckLayoutAtEachVersionBoundary(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		version, msgType, msa, err string
	}{
		{"2.3", "ACK^A01", "MSA|AE|C1|disk full", "ERR|^^^207&disk full&HL70357"},
		{"2.3.1", "ACK^A01^ACK", "MSA|AE|C1|disk full", "ERR|^^^207&disk full&HL70357"},
		{"2.4", "ACK^A01^ACK", "MSA|AE|C1|disk full", "ERR|^^^207&disk full&HL70357"},
		{"2.5", "ACK^A01^ACK", "MSA|AE|C1|disk full", "ERR|||207^Application internal error^HL70357|E||||disk full"},
		{"2.6", "ACK^A01^ACK", "MSA|AE|C1|disk full", "ERR|||207^Application internal error^HL70357|E||||disk full"},
		{"2.7", "ACK^A01^ACK", "MSA|AE|C1", "ERR|||207^Application internal error^HL70357|E||||disk full"},
	} {
		m := mustParse(t, []byte("MSH|^~\\&|A|B|C|D|||ADT^A01|C1|P|"+tt.version+"\rPID|1\r"))
		segs := strings.Split(strings.TrimSuffix(string(Ack(m, AE, "disk full")), "\r"), "\r")
		if len(segs) != 3 {
			t.Errorf("v%s: ACK has %d segments, want MSH, MSA, ERR: %q", tt.version, len(segs), segs)
			continue
		}
		if got := strings.Split(segs[0], "|")[8]; got != tt.msgType {
			t.Errorf("v%s: MSH-9 %q, want %q", tt.version, got, tt.msgType)
		}
		if segs[1] != tt.msa {
			t.Errorf("v%s: %q, want %q", tt.version, segs[1], tt.msa)
		}
		if segs[2] != tt.err {
			t.Errorf("v%s: %q, want %q", tt.version, segs[2], tt.err)
		}
	}
}

// TestAckReasonIsCutBetweenCharacters: MSA-3 and ERR-8 are bounded in
// bytes; a multi-byte character that straddles the bound is left out whole,
// never cut into invalid UTF-8 that a receiver may refuse to decode.
func TestAckReasonIsCutBetweenCharacters(t *testing.T) {
	t.Parallel()
	m := mustParse(t, mustRead(t, "adt_a01.hl7"))
	long := "x" + strings.Repeat("é", 600) // every bound falls inside an é
	a, err := ParseAck(Ack(m, AE, long))
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(a.Text) || !utf8.ValidString(a.ErrorMessage) {
		t.Fatalf("MSA-3 %q or ERR-8 (%d bytes) is not valid UTF-8", a.Text, len(a.ErrorMessage))
	}
	if len(a.Text) != 79 || len(a.ErrorMessage) != 999 || !strings.HasPrefix(long, a.Text) || !strings.HasPrefix(long, a.ErrorMessage) {
		t.Errorf("MSA-3 %d bytes, ERR-8 %d bytes: want 79 and 999", len(a.Text), len(a.ErrorMessage))
	}
}

// MSH-10 is required: CheckControlID refuses a message whose MSH-10 is
// empty, only blanks, or beyond the MSH's last field (ControlID is "" for
// one), with condition 101; an ACK to such a message leaves MSA-2 empty,
// there being nothing to echo (blanks echoed name no message either).
func TestCheckControlID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, msh, control, why string }{
		{"a control ID", "MSH|^~\\&|A|B|C|D|20260101||ADT^A01|CTRL1|P|2.5", "CTRL1", ""},
		{"blanks around one", "MSH|^~\\&|A|B|C|D|20260101||ADT^A01| C 2 |P|2.5", " C 2 ", ""},
		{"empty", "MSH|^~\\&|A|B|C|D|20260101||ADT^A01||P|2.5", "", "MSH-10 is empty"},
		{"empty, the last field", "MSH|^~\\&|A|B|C|D|20260101||ADT^A01|", "", "MSH-10 is empty"},
		{"blanks", "MSH|^~\\&|A|B|C|D|20260101||ADT^A01| \t |P|2.5", "", "MSH-10 holds only blanks"},
		{"nine fields", "MSH|^~\\&|A|B|C|D|20260101||ADT^A01", "", "ends before MSH-10"},
		{"two fields", "MSH|^~\\&", "", "ends before MSH-10"},
	} {
		m := mustParse(t, []byte(c.msh+"\rPID|1||P1|CTRL|x|y|z|w|v|u|t\r"))
		err := CheckControlID(m)
		if c.why == "" {
			if err != nil || m.ControlID() != c.control {
				t.Errorf("%s: CheckControlID %v, ControlID %q; want nil, %q", c.name, err, m.ControlID(), c.control)
			}
			continue
		}
		if !errors.Is(err, ErrNoControlID) || !strings.Contains(err.Error(), c.why) || ConditionOf(err) != CondRequiredFieldMissing {
			t.Errorf("%s: CheckControlID %v (condition %d); want ErrNoControlID saying %q, condition 101", c.name, err, ConditionOf(err), c.why)
		}
		if c.name != "blanks" && m.ControlID() != "" {
			t.Errorf("%s: ControlID %q, want empty", c.name, m.ControlID())
		}
		a, perr := ParseAck(AckCondition(m, AR, ConditionOf(err), err.Error()))
		if perr != nil || a.Code != AR || a.ControlID != "" || a.ErrorCode != "101" || !strings.Contains(a.Text, "MSH-10") {
			t.Errorf("%s: ACK read back %+v, %v; want AR, MSA-2 empty, 101, MSA-3 naming MSH-10", c.name, a, perr)
		}
	}
}

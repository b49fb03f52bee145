package hl7

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// referenceFrames is the specification of FrameReader, written byte by byte
// as plainly as possible: the frames a stream holds, then the error that
// ends it.
func referenceFrames(data []byte, max int) ([][]byte, error) {
	var frames [][]byte
	i := 0
	for {
		for i < len(data) && (data[i] == '\r' || data[i] == '\n') {
			i++
		}
		if i == len(data) {
			return frames, io.EOF
		}
		if data[i] != StartBlock {
			return frames, ErrNotFramed
		}
		i++
		payload := []byte{}
		for {
			if i == len(data) {
				return frames, io.ErrUnexpectedEOF
			}
			c := data[i]
			i++
			if c == EndBlock {
				break
			}
			if c == StartBlock {
				return frames, ErrNotFramed
			}
			if len(payload) == max {
				return frames, ErrFrameTooLarge
			}
			payload = append(payload, c)
		}
		if i == len(data) {
			return frames, io.ErrUnexpectedEOF
		}
		if data[i] != CarriageReturn {
			return frames, ErrNotFramed
		}
		i++
		frames = append(frames, payload)
	}
}

func FuzzFrameReader(f *testing.F) {
	adt, _ := os.ReadFile("testdata/adt_a01.hl7")
	seeds := []string{
		"", "\r\n", frame("A"), frame("") + frame("B"), frame(string(adt)),
		"junk", frame("A") + "x", "\x0bA\x0bB\x1c\r", "\x0bA\x1cB", "\x0bA\x1c", "\x0b",
		frame("12345678901234567890"), "\n\n" + frame("A") + "\r\n" + frame("B"),
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint8(0), uint16(16))
		f.Add([]byte(s), uint8(3), uint16(4096))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8, bound uint16) {
		max := int(bound%8192) + 1
		wantFrames, wantErr := referenceFrames(data, max)

		size := int(chunk%32) + 1
		fr := NewFrameReader(&chunkReader{data: data, size: func(int) int { return size }}, max)
		var got [][]byte
		var err error
		for {
			var p []byte
			if p, err = fr.ReadFrame(); err != nil {
				break
			}
			if len(p) > max {
				t.Fatalf("frame of %d bytes passed the bound %d", len(p), max)
			}
			got = append(got, p)
		}
		if !errors.Is(err, wantErr) {
			t.Fatalf("error %v, want %v", err, wantErr)
		}
		if len(got) != len(wantFrames) {
			t.Fatalf("%d frames, want %d", len(got), len(wantFrames))
		}
		for i := range got {
			if !bytes.Equal(got[i], wantFrames[i]) {
				t.Fatalf("frame %d: %q, want %q", i, got[i], wantFrames[i])
			}
		}
		// The frames read are framable, and read back the same.
		var buf bytes.Buffer
		for _, p := range got {
			if err := WriteFrame(&buf, p); err != nil {
				t.Fatalf("WriteFrame of a frame read: %v", err)
			}
		}
		again, err := readAll(&buf, max)
		if err != io.EOF || len(again) != len(got) {
			t.Fatalf("re-reading %d frames: %d, %v", len(got), len(again), err)
		}
	})
}

// fuzzPaths are looked up in every message FuzzParse parses.
var fuzzPaths = []Path{
	MustParsePath("MSH-1"), MustParsePath("MSH-2"), MustParsePath("MSH-2.3"), MustParsePath("MSH-9.2"),
	MustParsePath("MSH-12.1.2"), MustParsePath("PID-3[2].4.1"), MustParsePath("PID[2]-1"),
	MustParsePath("OBX[3]-5[4].3.2"), MustParsePath("ZZZ-9999"),
	{Segment: "MSH", Field: 0}, {Segment: "PID", Field: -3, Repetition: -1, Component: -2},
}

func addTestdataSeeds(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.hl7")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(bytes.ReplaceAll(b, []byte("\r"), []byte("\n")))
	}
}

func FuzzParse(f *testing.F) {
	addTestdataSeeds(f)
	for _, s := range []string{
		"", "MSH", "MSH|", "MSH|^~\\&", "MSH|^~\\&#|", "MSH#$*@%#A$B", "MSH|^^\\&|", "PID|1",
		"MSH|^~\\&|A|B|C|D|||ADT^A01|1|P|2.3\rPID|1||a~b^c&d\r", "MSH|^~\\&|||||||||2.4|||AL\r",
		"MSH+^~\\&+A+B+C+D+++ADT^A04+1+P+2.5\r", "MSH-^~\\&-A-B-C-D---ADT^A04-1-P-2.5\r",
		// Two-byte sets whose second bytes can be delimiters' (charset.go).
		"MSH|^~\\&|A|\xb0\x7c|C|D|||ADT^A01|\xb3\x5c1|P|2.5|||AL|NE||BIG-5\rPID|1||\xa4\x5e^b\r",
		"MSH|^~\\&|A|\x81\x7c|C|D|||ADT^A01|1\x95\x32\x82\x36|P|2.5||||||GB 18030-2000\r",
		"MSH|^~\\&|A|\x1b$BF|\x1b(B|C|D|||ADT^A01|\x1b$BF|K\\\x1b(B|P|2.5||||||~ISO IR87\rPID|1||\x1b$BF|\r",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		m, err := Parse(data)
		if !bytes.Equal(data, in) {
			t.Fatal("Parse modified its input")
		}
		if err != nil {
			if m != nil || !(errors.Is(err, ErrNoMSH) || errors.Is(err, ErrBadSeparators) || errors.Is(err, ErrSecondMSH)) {
				t.Fatalf("Parse = %v, %v", m, err)
			}
			if nak := NakUnparsableCondition(ConditionOf(err), err.Error()); !validAck(t, nak, AR, "", DefaultSeparators) {
				t.Fatalf("NAK for %v does not parse back", err)
			}
			return
		}
		if !bytes.Equal(m.Raw(), data) {
			t.Fatal("Raw() differs from the input")
		}
		sep := m.Separators()
		if _, err := parseSeparators([]byte("MSH" + string(sep.Field) + sep.EncodingCharacters())); err != nil {
			t.Fatalf("separators %+v are not valid: %v", sep, err)
		}
		for _, p := range fuzzPaths {
			v := m.Get(p)
			if strings.ContainsAny(v, "\r\n") {
				t.Fatalf("Get(%v) = %q spans segments", p, v)
			}
		}
		if v := m.ControlID(); indexScan(v, sep.Field, sep.scan) >= 0 {
			t.Fatalf("ControlID %q holds a field separator", v)
		}
		// A message without a control ID (MSH-10 empty, only blanks, or
		// missing) is refused, with condition 101, and its ACKs echo none.
		control := m.ControlID()
		if cerr := CheckControlID(m); (cerr != nil) != (strings.TrimSpace(control) == "") {
			t.Fatalf("CheckControlID = %v for ControlID %q", cerr, control)
		} else if cerr != nil {
			if !errors.Is(cerr, ErrNoControlID) || ConditionOf(cerr) != CondRequiredFieldMissing {
				t.Fatalf("CheckControlID = %v (condition %d); want ErrNoControlID, condition 101", cerr, ConditionOf(cerr))
			}
			if ack := AckCondition(m, AR, ConditionOf(cerr), cerr.Error()); !validAck(t, ack, AR, "", sep) {
				t.Fatal("the AR to a message without a control ID does not parse back with MSA-2 empty")
			}
			control = ""
		}
		// Every ACK of a parsable message parses back, answering its control ID.
		for _, code := range []AckCode{AA, AE, AR, CA, CE, CR} {
			ack := Ack(m, code, "reason | with ^ separators \\ and\r\nbreaks")
			if !validAck(t, ack, code, control, sep) {
				t.Fatalf("ACK %s does not parse back", code)
			}
			am, _ := Parse(ack)
			// Its scan may differ (charset.go): the ACK holds little of
			// the message's text, and the block characters of what it
			// copies are made spaces, which can end or begin an ISO 2022
			// escape sequence. What it says (code, control id, trigger)
			// is checked above and below.
			got := am.Separators()
			got.scan = sep.scan
			if got != sep {
				t.Fatalf("ACK separators %+v, want %+v", am.Separators(), sep)
			}
			trig := escapeBlockChars(m.Get(Path{Segment: "MSH", Field: 9, Component: 2}), sep)
			if got := am.Get(Path{Segment: "MSH", Field: 9, Component: 2}); got != trig {
				t.Fatalf("ACK trigger %q, want %q", got, trig)
			}
		}
	})
}

// validAck reports whether ack can be framed and parses as an
// acknowledgment with code and control ID (raw, block characters escaped).
func validAck(t *testing.T, ack []byte, code AckCode, control string, sep Separators) bool {
	t.Helper()
	if _, err := AppendFrame(nil, ack); err != nil {
		t.Logf("ACK cannot be framed: %v", err)
		return false
	}
	a, err := ParseAck(ack)
	if err != nil {
		t.Logf("ParseAck: %v\n%q", err, ack)
		return false
	}
	// The raw control ID, with MLLP block characters hex-escaped.
	if a.Code != code || a.ControlID != escapeBlockChars(control, sep) {
		t.Logf("read back %+v, want code %s control %q", a, code, control)
		return false
	}
	return true
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"PID-3", "PID-3.1", "PID-3.1.2", "OBX[2]-5", "PID-3[2].1", "MSH-9.2", "PID[1]-3[1]",
		"pid-3", "PID", "PID-", "PID-0", "PID-3.", "PID-99999", "PID-3[2", "PID-3.1.2.3", "", "ZZ9-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePath(s)
		if err != nil {
			if !errors.Is(err, ErrBadPath) {
				t.Fatalf("error %v does not wrap ErrBadPath", err)
			}
			return
		}
		if p.Field < 1 || p.Occurrence < 1 || p.Repetition < 1 || p.Component < 0 || p.Subcomponent < 0 ||
			(p.Subcomponent > 0 && p.Component == 0) || len(p.Segment) != 3 {
			t.Fatalf("ParsePath(%q) = %+v", s, p)
		}
		back, err := ParsePath(p.String())
		if err != nil || back != p {
			t.Fatalf("ParsePath(%q) = %+v; String %q parses to %+v, %v", s, p, p.String(), back, err)
		}
	})
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "plain", `|^~\&#`, `\F\`, "a\rb", `\X41\`} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, truncation bool) {
		sep := DefaultSeparators
		if truncation {
			sep.Truncation = '#'
		}
		e := Escape(s, sep)
		if strings.ContainsAny(e, "|^~&\r\n\x0b\x1c") || (truncation && strings.Contains(e, "#")) {
			t.Fatalf("Escape(%q) = %q holds a delimiter or line break", s, e)
		}
		want := []byte(s)
		for i, c := range want {
			if c < 0x20 || c == 0x7f {
				want[i] = ' '
			}
		}
		if got := Unescape(e, sep); got != string(want) {
			t.Fatalf("Unescape(Escape(%q)) = %q", s, got)
		}
		_ = Unescape(s, sep) // must not panic on anything
	})
}

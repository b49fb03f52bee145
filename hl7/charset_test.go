package hl7

import (
	"strings"
	"testing"
)

// Character sets whose two-byte characters can end in a delimiter's byte
// (charset.go): each field is found where the set's characters end, not
// inside one. The bytes are real encodings (Python's big5, gb18030 and
// iso2022_jp codecs): BIG-5 院 B0 7C, 許 B3 5C, 功 A5 5C; GB 18030 亅 81 7C,
// 廭 8F 5E, 𠀀 95 32 82 36; ISO 2022 日本 ESC $ B 46 7C 4B 5C ESC ( B.
func TestDelimiterBytesInsideTwoByteCharacters(t *testing.T) {
	t.Parallel()
	const (
		big5Hospital = "\xbb\x4f\xa4\x6a\xc2\xe5\xb0\x7c" // 臺大醫院
		big5Name     = "\xb3\x5c^\xa5\x5c"                // 許^功: the components of a name
		gbName       = "\x81\x7c\x8f\x5e^\x95\x32\x82\x36"
		jisName      = "\x1b$BF|K\\\x1b(B^\x1b$BF|\x1b(B"
	)
	for _, tt := range []struct {
		name, charset, facility, patient string
		family, given                    string
	}{
		{"BIG-5", "BIG-5", big5Hospital, big5Name, "\xb3\x5c", "\xa5\x5c"},
		{"BIG5, not the table's spelling", "BIG5", big5Hospital, big5Name, "\xb3\x5c", "\xa5\x5c"},
		{"GB 18030", "GB 18030-2000", "\x81\x7c", gbName, "\x81\x7c\x8f\x5e", "\x95\x32\x82\x36"},
		{"ISO IR87 as the second set", "~ISO IR87", "\x1b$BF|\x1b(B", jisName, "\x1b$BF|K\\\x1b(B", "\x1b$BF|\x1b(B"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw := "MSH|^~\\&|HIS|" + tt.facility + "|LIS|LAB|20261121090000||ADT^A01^ADT_A01|CTRL1|P|2.5.1|||AL|NE||" + tt.charset +
				"\rPID|1||P77||" + tt.patient + "||19700101|F\r"
			m := mustParse(t, []byte(raw))
			for _, c := range []struct{ got, want string }{
				{m.Get(Path{Segment: "MSH", Field: 4}), tt.facility},
				{m.ControlID(), "CTRL1"},
				{m.MessageType(), "ADT^A01^ADT_A01"},
				{m.AcceptAckType(), "AL"},
				{m.Get(Path{Segment: "PID", Field: 5, Component: 1}), tt.family},
				{m.Get(Path{Segment: "PID", Field: 5, Component: 2}), tt.given},
				{m.Get(Path{Segment: "PID", Field: 7}), "19700101"},
				{Unescape(m.Get(Path{Segment: "PID", Field: 5, Component: 1}), m.Separators()), tt.family},
			} {
				if c.got != c.want {
					t.Errorf("got %q, want %q", c.got, c.want)
				}
			}
			if got := m.Separators().Split(m.Get(Path{Segment: "PID", Field: 5}), '^'); len(got) != 2 || got[0] != tt.family || got[1] != tt.given {
				t.Errorf("Split(PID-5) = %q; want [%q %q]", got, tt.family, tt.given)
			}
			a, err := ParseAck(Ack(m, CA, ""))
			if err != nil || a.Code != CA || a.ControlID != "CTRL1" {
				t.Fatalf("the ACK: %+v, %v; want CA naming CTRL1", a, err)
			}
			ack := mustParse(t, Ack(m, CA, ""))
			if got := ack.Get(Path{Segment: "MSH", Field: 6}); got != tt.facility {
				t.Errorf("the ACK's MSH-6 %q; want the sending facility %q", got, tt.facility)
			}
			if got, _ := ack.field("MSH", 1, 18); string(got) != tt.charset {
				t.Errorf("the ACK's MSH-18 %q; want %q", got, tt.charset)
			}
		})
	}
}

// A message in a set whose characters never hold an ASCII byte is read byte
// by byte, as before: Latin-1's é (E9) before a delimiter is not a lead
// byte, whether MSH-18 says 8859/1 or nothing.
func TestSingleByteSetsAreReadByteByByte(t *testing.T) {
	t.Parallel()
	for _, charset := range []string{"8859/1", "", "UNICODE UTF-8"} {
		raw := "MSH|^~\\&|HIS|CAF\xe9|LIS|LAB|20261121090000||ADT^A01|CTRL2|P|2.5.1|||||" + charset +
			"\rPID|1||P77||REN\xe9^ANDR\xe9||19700101\r"
		m := mustParse(t, []byte(raw))
		if m.ControlID() != "CTRL2" || m.Get(Path{Segment: "PID", Field: 5, Component: 2}) != "ANDR\xe9" || m.Get(Path{Segment: "PID", Field: 7}) != "19700101" {
			t.Errorf("MSH-18 %q: control id %q, PID-5.2 %q, PID-7 %q", charset, m.ControlID(), m.Get(Path{Segment: "PID", Field: 5, Component: 2}), m.Get(Path{Segment: "PID", Field: 7}))
		}
		if got := strings.Join(m.Separators().Split("A\xe9^B", '^'), ","); got != "A\xe9,B" {
			t.Errorf("MSH-18 %q: Split = %q", charset, got)
		}
	}
}

// Read as the review of the scan found them misread: escapes that are no
// switch of G0 leave the ASCII bytes ASCII (a G1 designation of JIS X 0201
// katakana, ESC ) I, with its bytes above 0x80, as DICOM writes them), a
// switch of G0 to katakana (ESC ( I, 0x21 to 0x5F, where ^ is a katakana)
// lasts until ESC ( B, BIG-5 that is also valid UTF-8 (憿乞, E9 A1 A4 5E,
// is 顤 and ^ in UTF-8) is read as BIG-5, and CNS 11643 is read byte by
// byte (its EUC-TW bytes are all above 0x80; some senders mean Thai by it).
func TestSwitchesAndLabelsThatAreNoTwoByteText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, charset, pid5 string
		family, given       string
	}{
		{"G1 katakana", "~ISO IR87", "\x1b)I\xd4\xcf^\xc0\xdb", "\x1b)I\xd4\xcf", "\xc0\xdb"},
		{"G0 katakana", "~ISO IR87", "\x1b(I\x54\x5e\x1b(B^TARO", "\x1b(I\x54\x5e\x1b(B", "TARO"},
		{"BIG-5 that is also valid UTF-8", "BIG-5", "\xe9\xa1\xa4\x5e^TARO", "\xe9\xa1\xa4\x5e", "TARO"},
		{"CNS 11643", "CNS 11643-1992", "\xca\xc1\xb7\xc3^\xa1", "\xca\xc1\xb7\xc3", "\xa1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw := "MSH|^~\\&|HIS|HOSP|LIS|LAB|20261121090000||ADT^A01|CTRL3|P|2.5.1||||||" + tt.charset +
				"\rPID|1||P77||" + tt.pid5 + "||19700101|F\r"
			m := mustParse(t, []byte(raw))
			if got := m.Get(Path{Segment: "PID", Field: 5, Component: 1}); got != tt.family {
				t.Errorf("PID-5.1 %q; want %q", got, tt.family)
			}
			if got := m.Get(Path{Segment: "PID", Field: 5, Component: 2}); got != tt.given {
				t.Errorf("PID-5.2 %q; want %q", got, tt.given)
			}
			if got := m.Get(Path{Segment: "PID", Field: 7}); got != "19700101" {
				t.Errorf("PID-7 %q; want 19700101", got)
			}
			ack := mustParse(t, Ack(m, AA, ""))
			if got, _ := ack.field("MSH", 1, 18); string(got) != tt.charset {
				t.Errorf("the ACK's MSH-18 %q; want %q", got, tt.charset)
			}
		})
	}
}

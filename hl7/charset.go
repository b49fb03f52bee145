package hl7

import (
	"bytes"
	"strings"
)

// scan is how a message's bytes are searched for its delimiters, by the
// character set MSH-18 declares. In most character sets HL7 allows (ASCII,
// the ISO 8859 family, UTF-8, EUC-KR's KS X 1001, CNS 11643 as EUC-TW) no
// byte of a multi-byte character is an ASCII byte, so a delimiter is any
// byte equal to it. In a few a character's second byte can be one:
//
//   - BIG-5 and GB 18030-2000: a lead byte 0x81 to 0xFE is followed by a
//     byte 0x40 to 0xFE, which can be | (0x7C), \ (0x5C), ^ (0x5E) or ~
//     (0x7E): BIG-5's 院 is B0 7C. GB 18030's four-byte characters are two
//     such pairs (the second byte a digit). Split byte by byte, a sending
//     facility of 臺大醫院 in MSH-4 moved every later MSH field by one: the
//     ACK named MSH-9 as the control id, MSH-15's AL went unread, and the
//     route's filter saw no message type (the message was stored unrouted).
//     The label is taken at its word: UTF-8 text under it is read as the
//     set (E9 99 A2 5E is two BIG-5 characters, not 院 and ^), since the
//     bytes cannot tell the two apart (BIG-5's 憿乞, E9 A1 A4 5E, is also
//     valid UTF-8, for 顤 and ^). A UTF-8 sender declares UNICODE UTF-8.
//   - ISO IR87 and ISO IR159 (JIS X 0208 and 0212, switched to by ISO 2022
//     escape sequences written as raw ESC bytes, as JAHIS and SS-MIX2 do,
//     MSH-20 "ISO 2022-1994"): after a G0 designation of a set other than
//     ASCII (ESC $ B, ESC $ @, ESC $ ( D, or ESC ( I for JIS X 0201
//     katakana) and until ESC ( B (or ESC ( J) returns to ASCII, bytes are
//     0x21 to 0x7E characters of that set: 日 is 46 7C. HL7 requires the
//     delimiters in the single-byte set, so no byte between is one. Other
//     escapes (G1 to G3 designations, single shifts) leave the ASCII bytes
//     as they are. HL7's own switch escapes (\M2442\ ... \C2842\, MSH-20
//     "2.3") are not followed.
type scan uint8

const (
	scanBytes    scan = iota // every byte is a character, as far as delimiters go
	scanLeadByte             // BIG-5, GB 18030: a byte of 0x81 to 0xFE takes the next with it
	scanISO2022              // ISO IR87, ISO IR159: nothing between a G0 switch away from ASCII and the switch back
)

// charsetScan returns the scan that the character set named by an MSH-18
// repetition needs: HL7 table 0211's names, and the spellings without the
// table's blank or hyphen that senders write (case aside).
func charsetScan(name string) scan {
	switch strings.ToUpper(strings.Trim(name, " ")) {
	case "BIG-5", "BIG5", "GB 18030-2000", "GB18030-2000", "GB 18030", "GB18030":
		return scanLeadByte
	case "ISO IR87", "ISO-IR87", "ISO IR159", "ISO-IR159":
		return scanISO2022
	}
	return scanBytes
}

// msh18Scan reads MSH-18 from the MSH segment msh as scanned by sep.scan,
// and returns the scan its sets need (namedScan).
func msh18Scan(msh []byte, sep Separators) scan {
	// MSH-18 is piece 17 of the segment split at the field separator.
	field, ok := nthScan(msh, sep.Field, 17, sep.scan)
	if !ok {
		return scanBytes
	}
	return namedScan(field, sep)
}

// namedScan returns the scan that the character sets named in an MSH-18
// field need (each repetition: the first is the message's, the others
// those it switches to), split as sep.scan reads it: the first that is not
// scanBytes.
func namedScan(field []byte, sep Separators) scan {
	for rep := field; ; {
		i := indexScan(rep, sep.Repetition, sep.scan)
		name := rep
		if i >= 0 {
			name = rep[:i]
		}
		if s := charsetScan(string(name)); s != scanBytes {
			return s
		}
		if i < 0 {
			return scanBytes
		}
		rep = rep[i+1:]
	}
}

// messageScan is the scan of a message whose MSH segment is msh: the one
// that, reading MSH, finds in MSH-18 a set that needs it. MSH-18 comes
// after fields that may hold text in that set (MSH-4, the sending facility,
// often does), which only the set's own scan reads right. A message that
// reads otherwise under each (MSH-18 names BIG-5, but a byte before it is
// no BIG-5) is read byte by byte, as a message of any other set.
func messageScan(msh []byte, sep Separators) scan {
	for _, s := range []scan{scanLeadByte, scanISO2022} {
		sep.scan = s
		if msh18Scan(msh, sep) == s {
			return s
		}
	}
	return scanBytes
}

// brokenTwoByte reports whether m is read byte by byte although MSH-18,
// read so, names a set that needs another scan: that set's scan reads MSH
// otherwise (a lead byte before a delimiter, an unended switch to a
// two-byte set; messageScan). Its ACK must not declare
// that set: it would copy such bytes (the control id, MSH-3 to 6) and be
// read as the set, another way than the message was.
func (m *Message) brokenTwoByte() bool {
	if m.sep.scan != scanBytes {
		return false
	}
	f, _ := m.field("MSH", 1, 18)
	return namedScan(f, m.sep) != scanBytes
}

// indexScan returns the index of the first c in b that is a character of
// its own as s reads b, or -1; c is an ASCII delimiter. b starts at a
// character boundary in ASCII (the start of a segment or the byte after a
// delimiter).
func indexScan[T string | []byte](b T, c byte, s scan) int {
	switch s {
	case scanLeadByte:
		for i := 0; i < len(b); i++ {
			switch x := b[i]; {
			case x == c:
				return i
			case x >= 0x81 && x != 0xFF:
				i++ // the lead byte's second byte is part of its character
			}
		}
		return -1
	case scanISO2022:
		ascii := true
		for i := 0; i < len(b); i++ {
			switch x := b[i]; {
			case x == 0x1B:
				// ESC, intermediate bytes (0x20 to 0x2F), a final byte.
				j := i + 1
				for j < len(b) && b[j] >= 0x20 && b[j] <= 0x2F {
					j++
				}
				// A final byte is 0x30 to 0x7E, and no byte of the
				// sequence is c: an ESC before a delimiter (an ESC and a
				// block character the ACK made a blank, or a delimiter
				// in the intermediate bytes' range, & or !) must not hide
				// it. Else the ESC is a byte like any other.
				if j < len(b) && b[j] >= 0x30 && b[j] <= 0x7E && !holds(b[i+1:j+1], c) {
					ascii = g0ASCII(b[i+1:j+1], ascii)
					i = j
				}
			case ascii && x == c:
				return i
			}
		}
		return -1
	}
	switch v := any(b).(type) {
	case string:
		return strings.IndexByte(v, c)
	default:
		return bytes.IndexByte(v.([]byte), c)
	}
}

// holds reports whether b holds the byte c.
func holds[T string | []byte](b T, c byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] == c {
			return true
		}
	}
	return false
}

// g0ASCII returns whether ASCII bytes are ASCII after the ISO 2022 escape
// sequence ESC seq (its intermediate bytes and final byte), given whether
// they were before. Only a designation into G0 changes it: ESC ( B (ASCII)
// and ESC ( J (JIS X 0201 Roman, which puts ¥ and ‾ at 0x5C and 0x7E, the
// bytes of HL7's usual escape and repetition characters: its senders mean
// ASCII by it, and those bytes are read as delimiters) return to ASCII; ESC ( F of another set (ESC ( I, katakana at
// 0x21 to 0x5F) and a two-byte set, ESC $ F or ESC $ ( F, leave it.
func g0ASCII[T string | []byte](seq T, was bool) bool {
	switch {
	case len(seq) == 2 && seq[0] == '(':
		return seq[1] == 'B' || seq[1] == 'J'
	case len(seq) == 2 && seq[0] == '$', len(seq) == 3 && seq[0] == '$' && seq[1] == '(':
		return false
	}
	return was
}

// nthScan returns the i-th (0-based) piece of b split at sep, as s reads
// b, and whether b has that many pieces.
func nthScan(b []byte, sep byte, i int, s scan) ([]byte, bool) {
	for ; i > 0; i-- {
		j := indexScan(b, sep, s)
		if j < 0 {
			return nil, false
		}
		b = b[j+1:]
	}
	if j := indexScan(b, sep, s); j >= 0 {
		b = b[:j]
	}
	return b, true
}

// Split splits a raw value of a message with separators sep at the
// delimiter d (one of sep's), as the message's character set reads it:
// strings.Split would also split a two-byte character whose second byte is
// d (see scan).
func (sep Separators) Split(v string, d byte) []string {
	if sep.scan == scanBytes {
		return strings.Split(v, string(d))
	}
	var out []string
	for {
		i := indexScan(v, d, sep.scan)
		if i < 0 {
			return append(out, v)
		}
		out = append(out, v[:i])
		v = v[i+1:]
	}
}

package hl7

import (
	"bytes"
	"strings"
)

// scan is how a message's bytes are searched for its delimiters, by the
// character set MSH-18 declares. In most character sets HL7 allows (ASCII,
// the ISO 8859 family, UTF-8, EUC-KR's KS X 1001) no byte of a multi-byte
// character is an ASCII byte, so a delimiter is any byte equal to it. In
// three of them a character's second byte can be one:
//
//   - BIG-5 and GB 18030-2000: a lead byte 0x81 to 0xFE is followed by a
//     byte 0x40 to 0xFE, which can be | (0x7C), \ (0x5C), ^ (0x5E) or ~
//     (0x7E): BIG-5's 院 is B0 7C. GB 18030's four-byte characters are two
//     such pairs (the second byte a digit). Split byte by byte, a sending
//     facility of 臺大醫院 in MSH-4 moved every later MSH field by one: the
//     ACK named MSH-9 as the control id, MSH-15's AL went unread, and the
//     route's filter saw no message type (the message was stored unrouted).
//   - ISO IR87 and ISO IR159 (JIS X 0208 and 0212, switched to by ISO 2022
//     escape sequences, as HL7 and JAHIS use them): between ESC $ B (or
//     ESC $ @, ESC $ ( D) and the ESC ( B that returns to ASCII, bytes come
//     in pairs of 0x21 to 0x7E: 日 is 46 7C. HL7 requires the delimiters in
//     the single-byte set, so no byte between is one.
type scan uint8

const (
	scanBytes    scan = iota // every byte is a character, as far as delimiters go
	scanLeadByte             // BIG-5, GB 18030, CNS 11643: a byte of 0x81 to 0xFE takes the next with it
	scanISO2022              // ISO IR87, ISO IR159: nothing between a switch away from ASCII and the switch back
)

// charsetScan returns the scan that the character set named by an MSH-18
// repetition needs. Names are compared without case, blanks, hyphens and
// underscores, so that "BIG5" and "GB18030" are known too.
func charsetScan(name string) scan {
	n := strings.Map(func(r rune) rune {
		switch r {
		case ' ', '-', '_':
			return -1
		}
		return r
	}, strings.ToUpper(name))
	switch {
	case n == "BIG5", strings.HasPrefix(n, "GB18030"), strings.HasPrefix(n, "CNS11643"):
		return scanLeadByte
	case n == "ISOIR87", n == "ISOIR159":
		return scanISO2022
	}
	return scanBytes
}

// msh18Scan reads the character sets of MSH-18 (each repetition: the first
// is the message's, the others those it switches to) from the MSH segment
// msh as scanned by s, and returns the scan they need, the first that is
// not scanBytes.
func msh18Scan(msh []byte, sep Separators) scan {
	// MSH-18 is piece 17 of the segment split at the field separator.
	field, ok := nthScan(msh, sep.Field, 17, sep.scan)
	if !ok {
		return scanBytes
	}
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

// messageScan is the scan of a message whose MSH segment is msh. MSH-18
// comes after fields that may hold text in the set it names (MSH-4, the
// sending facility, often does): read byte by byte, such text can move it,
// so when that finds no set that needs more, it is read again as each
// other scan would read it, where the segment holds bytes that scan
// treats otherwise. A set found only so is the one the message declares.
func messageScan(msh []byte, sep Separators) scan {
	sep.scan = scanBytes
	if s := msh18Scan(msh, sep); s != scanBytes {
		return s
	}
	for _, s := range []scan{scanLeadByte, scanISO2022} {
		if !s.matters(msh) {
			continue
		}
		sep.scan = s
		if msh18Scan(msh, sep) == s {
			return s
		}
	}
	return scanBytes
}

// matters reports whether s finds delimiters in b other than scanBytes
// does: b holds a byte s reads otherwise.
func (s scan) matters(b []byte) bool {
	switch s {
	case scanLeadByte:
		for _, c := range b {
			if c >= 0x81 && c != 0xFF {
				return true
			}
		}
	case scanISO2022:
		return bytes.IndexByte(b, 0x1B) >= 0
	}
	return false
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
				if j < len(b) {
					// ESC ( B is ASCII, ESC ( J JIS X 0201 Roman (ASCII
					// but for ¥ and ‾, not delimiters HL7 would use).
					seq := string(b[i+1 : j+1])
					ascii = seq == "(B" || seq == "(J"
				}
				i = j
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

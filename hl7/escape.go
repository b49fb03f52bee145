package hl7

import (
	"encoding/hex"
	"strings"
)

// Escape makes s safe to put in one field, component or subcomponent of a
// message with separators sep: each delimiter becomes its HL7 escape
// sequence (\F\ field, \S\ component, \T\ subcomponent, \R\ repetition,
// \E\ escape, \P\ truncation; written with sep.Escape), and each control
// character (CR, LF, tab, MLLP block characters, ...) becomes a space, so
// that the result can never break a segment or an MLLP frame. Without an
// escape character (MSH-2 omits it) a delimiter cannot be escaped and
// becomes a space too.
func Escape(s string, sep Separators) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		var code byte
		switch {
		case c < 0x20 || c == 0x7f:
			b.WriteByte(' ')
			continue
		case c == sep.Escape:
			code = 'E'
		case c == sep.Field:
			code = 'F'
		case c == sep.Component:
			code = 'S'
		case sep.Subcomponent != 0 && c == sep.Subcomponent:
			code = 'T'
		case c == sep.Repetition:
			code = 'R'
		case sep.Truncation != 0 && c == sep.Truncation:
			code = 'P'
		default:
			b.WriteByte(c)
			continue
		}
		if sep.Escape == 0 {
			b.WriteByte(' ')
			continue
		}
		b.WriteByte(sep.Escape)
		b.WriteByte(code)
		b.WriteByte(sep.Escape)
	}
	return b.String()
}

// Unescape decodes the delimiter escape sequences of a raw value (\F\, \S\,
// \R\, \E\; \T\ when sep has a subcomponent separator, \P\ when it has a
// truncation character) and hexadecimal data (\Xhh...\). Other sequences
// (formatting such as \.br\ or \H\, character-set switches) and
// unterminated ones are left as they are.
func Unescape(s string, sep Separators) string {
	esc := sep.Escape
	if esc == 0 || indexScan(s, esc, sep.scan) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := indexScan(s, esc, sep.scan)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		j := indexScan(s[i+1:], esc, sep.scan)
		if j < 0 {
			b.WriteString(s[i:])
			return b.String()
		}
		seq, whole := s[i+1:i+1+j], s[i:i+2+j]
		s = s[i+2+j:]
		switch {
		case seq == "F":
			b.WriteByte(sep.Field)
		case seq == "S":
			b.WriteByte(sep.Component)
		case seq == "T" && sep.Subcomponent != 0:
			b.WriteByte(sep.Subcomponent)
		case seq == "R":
			b.WriteByte(sep.Repetition)
		case seq == "E":
			b.WriteByte(esc)
		case seq == "P" && sep.Truncation != 0:
			b.WriteByte(sep.Truncation)
		case len(seq) > 1 && seq[0] == 'X' && len(seq)%2 == 1:
			if data, err := hex.DecodeString(seq[1:]); err == nil {
				b.Write(data)
			} else {
				b.WriteString(whole)
			}
		default:
			b.WriteString(whole)
		}
	}
}

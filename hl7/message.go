package hl7

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNoMSH is wrapped by Parse's error when the input's first segment is
	// not an MSH segment (or there is no segment at all).
	ErrNoMSH = errors.New("hl7: first segment is not MSH")

	// ErrBadSeparators is wrapped by Parse's error when MSH-1 or MSH-2 do not
	// define a usable set of delimiters; the error says what is wrong.
	ErrBadSeparators = errors.New("hl7: bad separators")

	// ErrSecondMSH is wrapped by Parse's error when a later segment is an
	// MSH: a second message glued to the first (MLLP carries one message a
	// frame). Taken as one, it was routed and delivered whole in the first
	// one's lane, and its sender got one ACK for two messages.
	ErrSecondMSH = errors.New("hl7: a second message in one")

	// ErrNoControlID is wrapped by CheckControlID's error when MSH-10, the
	// message control ID HL7 requires, is empty, only blanks or missing.
	ErrNoControlID = errors.New("hl7: no control ID (MSH-10)")
)

// Separators are a message's delimiters, read from MSH-1 and MSH-2.
//
// HL7 lets MSH-2 omit the subcomponent separator when the message has no
// subcomponents, and the escape character too when it has no escape
// sequence (v2.3 Figure 2-1, v2.5 Table 2-1): an omitted one is 0, and the
// byte it would have been is plain data.
type Separators struct {
	Field        byte // MSH-1, usually '|'
	Component    byte // MSH-2[0], usually '^'
	Repetition   byte // MSH-2[1], usually '~'
	Escape       byte // MSH-2[2], usually '\'; 0 when omitted
	Subcomponent byte // MSH-2[3], usually '&'; 0 when omitted
	// Truncation is MSH-2[4] (HL7 v2.7 and later, usually '#'), or 0 when
	// MSH-2 has fewer than five characters.
	Truncation byte
	// scan is how the message's character set (MSH-18) is searched for
	// these delimiters (charset.go).
	scan scan
}

// DefaultSeparators are HL7's recommended delimiters, |^~\&.
var DefaultSeparators = Separators{Field: '|', Component: '^', Repetition: '~', Escape: '\\', Subcomponent: '&'}

// EncodingCharacters returns MSH-2: the component, repetition, escape and
// subcomponent characters, and the truncation character if there is one;
// an omitted one is left out.
func (s Separators) EncodingCharacters() string {
	b := []byte{s.Component, s.Repetition}
	for _, c := range []byte{s.Escape, s.Subcomponent, s.Truncation} {
		if c != 0 {
			b = append(b, c)
		}
	}
	return string(b)
}

// Message is a parsed HL7 v2 message. It keeps the bytes it was parsed from,
// untouched, and locates fields on demand. A Message is immutable and safe
// for concurrent use.
//
// Field values are returned raw: escape sequences (\F\, \S\, \T\, \R\, \E\,
// \Xhh\, ...) are not decoded. Use Unescape to decode a value for display.
type Message struct {
	// raw's segments are found when asked for (nextSegment), not indexed:
	// an index of slices took 24 bytes a segment, and a frame within
	// max_message_bytes made of one-byte segments ("Z\r" again and again)
	// held 12 times its size while it was stored and acknowledged, 1.2 GB
	// for 100 connections.
	raw []byte
	sep Separators
}

// nextSegment returns the first non-empty segment of b, and what follows
// it; seg is nil when none is left. Segments end at CR, LF or CRLF.
func nextSegment(b []byte) (seg, rest []byte) {
	for len(b) > 0 {
		i := segmentEnd(b)
		if i < 0 {
			return b, nil
		}
		if i > 0 {
			return b[:i], b[i+1:]
		}
		b = b[1:]
	}
	return nil, nil
}

// segmentEndWindow is how much of a message segmentEnd searches at a time.
const segmentEndWindow = 512

// segmentEnd returns the index of the first CR or LF in b, or -1. It looks
// window by window, with two vectorised byte searches in each: a search of
// the whole rest for CR found none in a message whose segments end in LF
// alone, and made each segment cost the rest of the message (a 1 MiB frame
// of one-byte segments took 7.8 s to parse).
func segmentEnd(b []byte) int {
	for off := 0; off < len(b); off += segmentEndWindow {
		w := b[off:min(off+segmentEndWindow, len(b))]
		i := bytes.IndexByte(w, '\r')
		if i >= 0 {
			w = w[:i]
		}
		if j := bytes.IndexByte(w, '\n'); j >= 0 {
			return off + j
		}
		if i >= 0 {
			return off + i
		}
	}
	return -1
}

// Parse parses an HL7 v2 message (the payload of an MLLP frame).
//
// Segments are separated by CR, as the standard says; LF and CRLF are
// accepted too, and empty lines are skipped. The first segment must be MSH
// (else the error wraps ErrNoMSH), and MSH-1 and MSH-2 must define distinct,
// non-alphanumeric, printable ASCII delimiters: the field separator and four
// encoding characters, or five with the truncation character of v2.7+, or
// two or three when the message omits the subcomponent separator and the
// escape character, as HL7 allows (else the error wraps ErrBadSeparators
// and says why). No later segment may be an MSH (ErrSecondMSH: a batch
// without its header, or two messages glued together). Nothing else is
// checked:
// an engine passes on what it cannot interpret.
//
// The Message refers to b, which the caller must not modify afterwards.
// Errors never quote the message's content beyond a segment ID.
func Parse(b []byte) (*Message, error) {
	m := &Message{raw: b}
	msh, rest := nextSegment(b)
	if msh == nil {
		return nil, fmt.Errorf("%w: the message is empty", ErrNoMSH)
	}
	if !bytes.HasPrefix(msh, []byte("MSH")) {
		return nil, fmt.Errorf("%w: it starts with %s", ErrNoMSH, quotePrefix(msh))
	}
	sep, err := parseSeparators(msh)
	if err != nil {
		return nil, err
	}
	sep.scan = messageScan(msh, sep)
	m.sep = sep
	for i, seg := 2, []byte(nil); ; i++ {
		if seg, rest = nextSegment(rest); seg == nil {
			break
		}
		if len(seg) > 3 && string(seg[:3]) == "MSH" && seg[3] == sep.Field {
			return nil, fmt.Errorf("%w: segment %d is an MSH, the start of a second message: send each message on its own (one per MLLP frame)", ErrSecondMSH, i)
		}
	}
	return m, nil
}

// ParseHeader parses the first segment of b alone, as a message of its MSH
// only, with Parse's errors for that segment (ErrNoMSH, ErrBadSeparators).
// It reads the header of a payload Parse refused with ErrSecondMSH, whose
// first message is whole up to the second MSH: its ACK is then the one that
// header asks for (its sender and receiver, version, character set and
// MSH-15), as for any message refused whole, not the one to bytes without
// a header (AckUnparsable).
func ParseHeader(b []byte) (*Message, error) {
	msh, _ := nextSegment(b)
	return Parse(msh)
}

// quotePrefix names the start of a segment that is not MSH, without quoting
// more than a segment ID's worth of it (it may be patient data).
func quotePrefix(seg []byte) string {
	if len(seg) > 3 {
		seg = seg[:3]
	}
	return fmt.Sprintf("%q", seg)
}

// parseSeparators reads MSH-1 and MSH-2 from the MSH segment.
func parseSeparators(msh []byte) (Separators, error) {
	bad := func(format string, args ...any) (Separators, error) {
		return Separators{}, fmt.Errorf("%w: %s", ErrBadSeparators, fmt.Sprintf(format, args...))
	}
	if len(msh) < 4 {
		return bad("the MSH segment ends before its field separator (MSH-1)")
	}
	fs := msh[3]
	if reason := delimiterProblem(fs); reason != "" {
		return bad("field separator (MSH-1) %s", reason)
	}
	enc := msh[4:]
	if i := bytes.IndexByte(enc, fs); i >= 0 {
		enc = enc[:i]
	}
	switch {
	case len(enc) < 2:
		return bad("MSH-2 has %d encoding characters, want 4 (component, repetition, escape, subcomponent), or at least the first 2", len(enc))
	case len(enc) > 5:
		return bad("MSH-2 has %d encoding characters, want 4, or 5 with the truncation character", len(enc))
	}
	names := [...]string{"field separator (MSH-1)", "component separator (MSH-2.1)", "repetition separator (MSH-2.2)",
		"escape character (MSH-2.3)", "subcomponent separator (MSH-2.4)", "truncation character (MSH-2.5)"}
	all := append([]byte{fs}, enc...)
	for i := 1; i < len(all); i++ {
		if reason := delimiterProblem(all[i]); reason != "" {
			return bad("%s %s", names[i], reason)
		}
		for j := 0; j < i; j++ {
			if all[j] == all[i] {
				return bad("%s %q is also the %s", names[i], all[i], names[j])
			}
		}
	}
	s := Separators{Field: fs, Component: enc[0], Repetition: enc[1]}
	for i, c := range []*byte{&s.Escape, &s.Subcomponent, &s.Truncation} {
		if 2+i < len(enc) {
			*c = enc[2+i]
		}
	}
	return s, nil
}

// delimiterProblem says why c cannot be a delimiter, or returns "".
func delimiterProblem(c byte) string {
	switch {
	case c == '\r' || c == '\n':
		return "is a line break"
	case c >= '0' && c <= '9', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		return fmt.Sprintf("%q is alphanumeric", c)
	case c == ' ':
		return "is a space"
	case c < 0x20 || c == 0x7f:
		return fmt.Sprintf("is the control character 0x%02x", c)
	case c >= 0x80:
		return fmt.Sprintf("is the non-ASCII byte 0x%02x", c)
	}
	return ""
}

// Raw returns the bytes the message was parsed from, untouched.
func (m *Message) Raw() []byte { return m.raw }

// Separators returns the message's delimiters.
func (m *Message) Separators() Separators { return m.sep }

// ControlID returns MSH-10, the message control ID, raw and whole: a
// repetition separator in it (not conformant, but sent) is kept, so that
// MSA-2 echoes the field as it came and an ACK that echoes it so matches.
// It is "" when the MSH segment ends before MSH-10.
func (m *Message) ControlID() string {
	f, _ := m.field("MSH", 1, 10)
	return string(f)
}

// CheckControlID returns an error wrapping ErrNoControlID, saying why, when
// m has no control ID: MSH-10 is empty, holds only blanks, or lies beyond
// the MSH segment's last field; else nil. HL7 v2 requires MSH-10: it is how
// an ACK names the message it answers (MSA-2), and how the message is found
// later. Parse does not check it (an ACK, or a message an engine passes on,
// is read all the same); an inbound refuses such a message.
func CheckControlID(m *Message) error {
	f, ok := m.field("MSH", 1, 10)
	why := ""
	switch {
	case !ok:
		why = "the MSH segment ends before MSH-10"
	case len(f) == 0:
		why = "MSH-10 is empty"
	case blank(string(f)):
		why = "MSH-10 holds only blanks"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s; HL7 requires one, unique to each message, for an ACK to name it: the sending system must set it", ErrNoControlID, why)
}

// blank reports whether s is empty or only white space.
func blank(s string) bool { return strings.TrimSpace(s) == "" }

// MessageType returns MSH-9 as sent, e.g. "ADT^A01^ADT_A01".
func (m *Message) MessageType() string { return m.Get(Path{Segment: "MSH", Field: 9}) }

// ProcessingID returns MSH-11.1, the processing ID: P (production), T
// (training) or D (debugging), HL7 table 0103, without the blanks a
// fixed-width sender pads it with ("P " is P: an inbound that takes P only
// refused it AR, which its sender does not resend).
func (m *Message) ProcessingID() string {
	return strings.TrimSpace(m.Get(Path{Segment: "MSH", Field: 11, Component: 1}))
}

// Version returns the version ID, MSH-12.1 (e.g. "2.5.1"), without the
// internationalisation components MSH-12 may carry.
func (m *Message) Version() string { return m.Get(Path{Segment: "MSH", Field: 12, Component: 1}) }

// AcceptAckType returns MSH-15 (AL, NE, ER, SU or empty). HL7's null, a
// field of "" (a sender that writes it in every empty field), is empty:
// the standard keeps the original mode when MSH-15 and MSH-16 are "null or
// not present".
func (m *Message) AcceptAckType() string { return notNull(m.Get(Path{Segment: "MSH", Field: 15})) }

// AppAckType returns MSH-16 (AL, NE, ER, SU or empty); "" (HL7's null) is
// empty, as in AcceptAckType.
func (m *Message) AppAckType() string { return notNull(m.Get(Path{Segment: "MSH", Field: 16})) }

// notNull returns v without surrounding blanks, or "" for HL7's explicit
// null, a field of "". Blanks are no value: an MSH-15 of one space (a
// fixed-width sender's padding) switched an original-mode sender to
// enhanced mode, answered CA where it looks for AA, and an "NE " asked for
// ACKs a sender of NE never reads.
func notNull(v string) string {
	v = strings.TrimSpace(v)
	if v == `""` {
		return ""
	}
	return v
}

// Field parses path (see ParsePath) and returns its value, raw; a part the
// message does not have is "". The error is ParsePath's.
func (m *Message) Field(path string) (string, error) {
	p, err := ParsePath(path)
	if err != nil {
		return "", err
	}
	return m.Get(p), nil
}

// Get returns the value at p, raw (escape sequences are not decoded); a part
// the message does not have is "". A path without a component returns the
// whole repetition, with its component separators; one with a component but
// no subcomponent returns the whole component.
//
// MSH is numbered as the standard numbers it: MSH-1 is the field separator,
// MSH-2 the encoding characters (neither is split into components), MSH-3
// the sending application.
func (m *Message) Get(p Path) string {
	return string(m.get(p))
}

func (m *Message) get(p Path) []byte {
	field, ok := m.field(p.Segment, max(p.Occurrence, 1), p.Field)
	if !ok {
		return nil
	}
	rep, comp, sub := max(p.Repetition, 1), p.Component, p.Subcomponent
	if p.Segment == "MSH" && p.Field <= 2 {
		// MSH-1 and MSH-2 are the delimiters themselves: never split.
		if rep > 1 || comp > 1 || sub > 1 {
			return nil
		}
		return field
	}
	v, ok := nthScan(field, m.sep.Repetition, rep-1, m.sep.scan)
	if !ok || comp == 0 {
		return v
	}
	if v, ok = nthScan(v, m.sep.Component, comp-1, m.sep.scan); !ok || sub == 0 {
		return v
	}
	if m.sep.Subcomponent == 0 {
		// No subcomponent separator: a component is its one subcomponent.
		if sub > 1 {
			return nil
		}
		return v
	}
	v, _ = nthScan(v, m.sep.Subcomponent, sub-1, m.sep.scan)
	return v
}

// field returns the whole of field n (1-based) of the occurrence-th
// (1-based) segment named seg, with its repetitions.
func (m *Message) field(seg string, occurrence, n int) ([]byte, bool) {
	if len(seg) != 3 || n < 1 {
		return nil, false
	}
	s := m.segment(seg, occurrence)
	if s == nil {
		return nil, false
	}
	if seg == "MSH" {
		if n == 1 {
			return s[3:4], true
		}
		// MSH-2 is the first piece after the field separator: MSH-n is
		// piece n-1, where other segments' field n is piece n.
		n--
	}
	return nthScan(s, m.sep.Field, n, m.sep.scan)
}

// segment returns the occurrence-th (1-based) segment named seg, or nil.
func (m *Message) segment(seg string, occurrence int) []byte {
	for s, rest := nextSegment(m.raw); s != nil; s, rest = nextSegment(rest) {
		if len(s) >= 3 && string(s[:3]) == seg && (len(s) == 3 || s[3] == m.sep.Field) {
			if occurrence--; occurrence == 0 {
				return s
			}
		}
	}
	return nil
}

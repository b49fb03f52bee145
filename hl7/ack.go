package hl7

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/messagefoundry/mf/internal/textcut"
)

// AckCode is an acknowledgment code, MSA-1 (HL7 table 0008).
type AckCode string

// Acknowledgment codes. Original mode answers AA/AE/AR; enhanced mode's
// accept (commit) acknowledgment answers CA/CE/CR.
const (
	AA AckCode = "AA" // original mode: application accept
	AE AckCode = "AE" // original mode: application error; the sender should retry
	AR AckCode = "AR" // original mode: application reject
	CA AckCode = "CA" // enhanced mode: commit accept
	CE AckCode = "CE" // enhanced mode: commit error; the sender should retry
	CR AckCode = "CR" // enhanced mode: commit reject
)

// Valid reports whether c is one of the six acknowledgment codes.
func (c AckCode) Valid() bool {
	switch c {
	case AA, AE, AR, CA, CE, CR:
		return true
	}
	return false
}

// Outcome returns what c says happened to the message; an invalid code is
// Error.
func (c AckCode) Outcome() Outcome {
	switch c {
	case AA, CA:
		return Accept
	case AR, CR:
		return Reject
	}
	return Error
}

// Outcome is what a receiver did with a message, whatever the
// acknowledgment mode.
type Outcome int

// Outcomes.
const (
	// Accept: the message is safely stored (AA, CA).
	Accept Outcome = iota
	// Error: the message was not stored, for a reason that may pass;
	// the sender keeps it and retries (AE, CE).
	Error
	// Reject: the message will never be accepted as it is (AR, CR).
	Reject
)

// String returns "accept", "error" or "reject".
func (o Outcome) String() string {
	switch o {
	case Accept:
		return "accept"
	case Error:
		return "error"
	case Reject:
		return "reject"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// AckModeEnhanced reports whether m asks for enhanced-mode acknowledgment,
// that is whether its MSH-15 (accept acknowledgment type) is valued.
//
// The standard enters enhanced mode when MSH-15 or MSH-16 is valued. An
// engine answers only the accept (commit) acknowledgment, which MSH-15
// governs; a sender that leaves MSH-15 empty has not asked for one, and the
// only answer it can be waiting for is the original-mode AA/AE/AR.
func AckModeEnhanced(m *Message) bool {
	return m != nil && m.AcceptAckType() != ""
}

// AcceptCode returns the acknowledgment code for outcome in m's mode:
// AA/AE/AR in original mode, CA/CE/CR in enhanced mode.
func AcceptCode(m *Message, outcome Outcome) AckCode {
	enhanced := AckModeEnhanced(m)
	switch outcome {
	case Accept:
		if enhanced {
			return CA
		}
		return AA
	case Reject:
		if enhanced {
			return CR
		}
		return AR
	}
	if enhanced {
		return CE
	}
	return AE
}

// ShouldAck reports whether the sender of m wants an acknowledgment with
// code: always in original mode; in enhanced mode as MSH-15 says (AL always,
// NE never, ER only when not accepted, SU only when accepted; any other value
// always). When it returns false the listener sends nothing back for m (the
// sender does not wait for it) and keeps the connection open.
func ShouldAck(m *Message, code AckCode) bool {
	if !AckModeEnhanced(m) {
		return true
	}
	switch m.AcceptAckType() {
	case "NE":
		return false
	case "ER":
		return code.Outcome() != Accept
	case "SU":
		return code.Outcome() == Accept
	}
	return true
}

// Condition is an HL7 message error condition code (HL7 table 0357), as an
// ACK's ERR segment reports it.
type Condition int

// Message error conditions (HL7 table 0357).
const (
	CondAccepted                Condition = 0   // message accepted
	CondSegmentSequence         Condition = 100 // segments out of order, or a required segment missing
	CondRequiredFieldMissing    Condition = 101
	CondDataType                Condition = 102
	CondTableValueNotFound      Condition = 103
	CondValueTooLong            Condition = 104 // v2.7+; also "too long to handle safely"
	CondUnsupportedMessageType  Condition = 200
	CondUnsupportedEventCode    Condition = 201
	CondUnsupportedProcessingID Condition = 202
	CondUnsupportedVersionID    Condition = 203
	CondUnknownKey              Condition = 204
	CondDuplicateKey            Condition = 205
	CondRecordLocked            Condition = 206
	CondInternalError           Condition = 207 // application internal error: the catch-all
)

// String returns the condition's description in table 0357.
func (c Condition) String() string {
	switch c {
	case CondAccepted:
		return "Message accepted"
	case CondSegmentSequence:
		return "Segment sequence error"
	case CondRequiredFieldMissing:
		return "Required field missing"
	case CondDataType:
		return "Data type error"
	case CondTableValueNotFound:
		return "Table value not found"
	case CondValueTooLong:
		return "Value too long"
	case CondUnsupportedMessageType:
		return "Unsupported message type"
	case CondUnsupportedEventCode:
		return "Unsupported event code"
	case CondUnsupportedProcessingID:
		return "Unsupported processing id"
	case CondUnsupportedVersionID:
		return "Unsupported version id"
	case CondUnknownKey:
		return "Unknown key identifier"
	case CondDuplicateKey:
		return "Duplicate key identifier"
	case CondRecordLocked:
		return "Application record locked"
	case CondInternalError:
		return "Application internal error"
	}
	return "Condition " + strconv.Itoa(int(c))
}

// ConditionOf returns the condition that best reports err, an error of this
// package: a missing MSH, a second one or broken framing is 100 (segment
// sequence error), no control ID 101 (required field missing), bad
// separators 102 (MSH-1/MSH-2 hold the wrong kind of data), an oversize
// frame 104; anything else is 207.
func ConditionOf(err error) Condition {
	switch {
	case err == nil:
		return CondAccepted
	case errors.Is(err, ErrNoMSH), errors.Is(err, ErrNotFramed), errors.Is(err, ErrSecondMSH):
		return CondSegmentSequence
	case errors.Is(err, ErrNoControlID):
		return CondRequiredFieldMissing
	case errors.Is(err, ErrBadSeparators):
		return CondDataType
	case errors.Is(err, ErrFrameTooLarge):
		return CondValueTooLong
	}
	return CondInternalError
}

// Limits on the reason text an ACK carries.
const (
	maxShortText = 80   // MSA-3 (ST, 80 characters in v2.3-v2.6)
	maxReason    = 1000 // ERR-8 / ERR-1
)

// defaultVersion is MSH-12 of a NAK to input without a usable MSH.
const defaultVersion = "2.5"

// now is the clock ACK timestamps are read from; tests replace it.
var now = time.Now

// Ack builds the acknowledgment of m with code (DESIGN §6), without MLLP
// framing:
//
//	MSH  the same separators as m; MSH-3/4 and MSH-5/6 swapped from m's
//	     (the ACK comes from m's receiver); MSH-7 now (see ackTime); MSH-9 ACK^<MSH-9.2>^ACK
//	     (ACK^<trigger> before v2.3.1, plain ACK when m has no trigger);
//	     MSH-10 a new control ID; MSH-11 and MSH-12 copied from m; MSH-18
//	     (character set) copied from m when m has one: the copied MSH-3..6
//	     are in m's character set, so the ACK is too, and says so
//	MSA  MSA-1 code, MSA-2 m's MSH-10 (empty when MSH-10 holds only
//	     blanks: they name no message), MSA-3 the reason shortened to 80
//	     characters (left empty from v2.7, which withdrew MSA-3; kept when
//	     m's version cannot be read)
//	ERR  only when reason is not empty: see below
//
// The reason is escaped (it can never break the message); nothing of m's
// content beyond those MSH fields and its control ID is copied. ERR-3 is
// 0 (message accepted) for AA/CA and 207 (application internal error)
// otherwise; use AckCondition to choose it.
//
// The ERR layout follows m's version (MSH-12.1). HL7 v2.5 rebuilt ERR:
// ERR-1 (error code and location) became "retained for backward
// compatibility", and the error is ERR-3 (HL7 error code, a CWE from table
// 0357, required), ERR-4 (severity from table 0516, required: E, W or I) and
// ERR-8 (user message, TX). So for v2.5 and later, and for a version we
// cannot read, the ERR is
//
//	ERR|||207^Application internal error^HL70357|E||||<reason>
//
// Before v2.5, ERR has the single field ERR-1, the composite <segment ID> ^
// <sequence> ^ <field position> ^ <code identifying error (CE)>, whose CE
// sits in subcomponents; the reason goes in the CE's text, as other engines
// do, since there is no user-message field:
//
//	ERR|^^^207&<reason>&HL70357
//
// (or ERR|^^^207 when m's MSH-2 omits the subcomponent separator).
//
// A nil m is answered like NakUnparsable, with code.
func Ack(m *Message, code AckCode, reason string) []byte {
	cond := CondInternalError
	if code.Outcome() == Accept {
		cond = CondAccepted
	}
	return AckCondition(m, code, cond, reason)
}

// AckCondition is Ack with the ERR segment's condition chosen by the
// caller.
func AckCondition(m *Message, code AckCode, cond Condition, reason string) []byte {
	if m == nil {
		return buildAck(defaultHeader(), code, cond, reason)
	}
	// Values copied raw keep their meaning (same separators), but a raw
	// value may hold an MLLP block character (from a file inbound, say),
	// which would make the ACK unframeable: those are hex-escaped.
	safe := func(s string) string { return escapeBlockChars(s, m.sep) }
	get := func(field int) string {
		f, _ := m.field("MSH", 1, field)
		return safe(string(f))
	}
	h := ackHeader{
		sep:     m.sep,
		sendApp: get(5), sendFac: get(6), recvApp: get(3), recvFac: get(4),
		trigger:  safe(m.Get(Path{Segment: "MSH", Field: 9, Component: 2})),
		control:  safe(echoedControlID(m)),
		procID:   get(11),
		version:  get(12),
		versionN: m.Version(),
		charset:  get(18),
	}
	if raw, _ := m.field("MSH", 1, 18); m.brokenTwoByte() || string(raw) != h.charset {
		// Read byte by byte, as the message was; or an MLLP block
		// character in it was escaped, which could make a name of it
		// ("ISO\vIR87" became "ISO IR87") and the ACK be read otherwise
		// than the message. Neither names a set the ACK could declare.
		h.charset = ""
	}
	// MSH-11 and MSH-12 are required in every message, the ACK too: a
	// sender whose own MSH left them empty gets those of an unparsable
	// input's NAK, or an ACK its HL7 library may refuse to read (HAPI needs
	// MSH-12), and it would send the message again.
	if blank(h.procID) {
		h.procID = "P"
	}
	if blank(h.version) {
		// Escaped: "." may be one of the message's delimiters, and then
		// 2.5 split MSH-12 in two, pushing MSH-18 along. Left blank when
		// it cannot be escaped (MSH-2 without an escape character).
		h.versionN = defaultVersion
		if v := Escape(defaultVersion, m.sep); v == defaultVersion || m.sep.Escape != 0 {
			h.version = v
		}
	}
	return buildAck(h, code, cond, reason)
}

// echoedControlID is what an ACK to m echoes in MSA-2: MSH-10 raw, or ""
// when it holds only blanks (CheckControlID refuses it).
func echoedControlID(m *Message) string {
	if c := m.ControlID(); !blank(c) {
		return c
	}
	return ""
}

// escapeBlockChars hex-escapes (\X0B\, \X1C\) the MLLP block characters
// in a raw value; without an escape character they become spaces.
func escapeBlockChars(s string, sep Separators) string {
	if !strings.ContainsAny(s, "\x0b\x1c") {
		return s
	}
	if sep.Escape == 0 {
		return strings.NewReplacer("\x0b", " ", "\x1c", " ").Replace(s)
	}
	e := string(sep.Escape)
	return strings.NewReplacer("\x0b", e+"X0B"+e, "\x1c", e+"X1C"+e).Replace(s)
}

// NakUnparsable builds an AR for input that could not be parsed at all (no
// MSH, bad separators, broken framing): default separators |^~\&, sending
// application "MF", version 2.5, an empty MSA-2 (there is no control ID to
// echo), and an ERR with condition 100 (a usable MSH segment is missing)
// carrying reason. NakUnparsableCondition chooses another condition, e.g.
// ConditionOf(err); AckUnparsable answers a payload Parse refused.
func NakUnparsable(reason string) []byte {
	return NakUnparsableCondition(CondSegmentSequence, reason)
}

// NakUnparsableCondition is NakUnparsable with the ERR condition chosen by
// the caller.
func NakUnparsableCondition(cond Condition, reason string) []byte {
	return buildAck(defaultHeader(), AR, cond, reason)
}

// AckUnparsable answers payload, input Parse refused, with code and the ERR
// condition cond, as NakUnparsable does, but its MSA-2 echoes payload's
// control ID when UnparsableControlID can read it: a sender that matches
// each ACK to its message by MSA-2 then takes the answer as its message's,
// instead of an answer to nothing. A payload refused for a second MSH has a
// header to answer by: see ParseHeader.
func AckUnparsable(payload []byte, code AckCode, cond Condition, reason string) []byte {
	h := defaultHeader()
	h.control = UnparsableControlID(payload)
	return buildAck(h, code, cond, reason)
}

// maxControlID is MSH-10's length from v2.7 (20 before): a longer value is
// not a control ID.
const maxControlID = 199

// UnparsableControlID returns MSH-10 of payload, a message whose encoding
// characters (MSH-2) Parse refused, or "" when it cannot be read safely.
//
// Fields are counted by the field separator alone (MSH-1, the byte after
// "MSH"), exactly as the sender counted them when it wrote its MSH-10; the
// encoding characters only split a field further. So the value is the
// sender's own as long as MSH-1 is a usable delimiter. It is given only
// when it can go into an ACK with the default separators unchanged, so that
// it compares equal to what the sender holds: printable ASCII, none of
// |^~\&, at most 199 characters. Without a usable MSH-1 there are no
// fields to count, and "" is returned.
func UnparsableControlID(payload []byte) string {
	msh := bytes.TrimLeft(payload, "\r\n") // Parse skips empty lines too
	if i := bytes.IndexAny(msh, "\r\n"); i >= 0 {
		msh = msh[:i]
	}
	if len(msh) < 4 || !bytes.HasPrefix(msh, []byte("MSH")) || delimiterProblem(msh[3]) != "" {
		return ""
	}
	fields := bytes.SplitN(msh, msh[3:4], 11) // fields[n-1] is MSH-n
	if len(fields) < 10 {
		return ""
	}
	v := fields[9]
	if len(v) == 0 || len(v) > maxControlID {
		return ""
	}
	for _, c := range v {
		if c < 0x20 || c > 0x7e || strings.IndexByte(DefaultSeparators.EncodingCharacters()+string(DefaultSeparators.Field), c) >= 0 {
			return ""
		}
	}
	return string(v)
}

// NewControlID returns a new message control ID: "MF" and 18 random
// hexadecimal digits, 20 characters (MSH-10's length before v2.7).
func NewControlID() string {
	var b [9]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "MF" + strings.ToUpper(hex.EncodeToString(b[:]))
}

// ackHeader is what an ACK takes from the message it answers; raw values.
type ackHeader struct {
	sep                                Separators
	sendApp, sendFac, recvApp, recvFac string // the ACK's MSH-3..6
	trigger                            string // MSH-9.2 of the original
	control                            string // MSH-10 of the original: MSA-2
	procID, version                    string // MSH-11, MSH-12
	versionN                           string // MSH-12.1
	charset                            string // MSH-18, every repetition
}

func defaultHeader() ackHeader {
	return ackHeader{sep: DefaultSeparators, sendApp: "MF", procID: "P", version: defaultVersion, versionN: defaultVersion}
}

func buildAck(h ackHeader, code AckCode, cond Condition, reason string) []byte {
	sep := h.sep
	fs, cs, ss := string(sep.Field), string(sep.Component), string(sep.Subcomponent)
	esc := func(s string) string { return Escape(s, sep) }
	var b strings.Builder

	msgType := "ACK"
	if h.trigger != "" {
		msgType += cs + h.trigger
		if !versionBefore(h.versionN, 2, 3, 1) {
			msgType += cs + "ACK"
		}
	}
	b.WriteString("MSH" + fs + sep.EncodingCharacters())
	for _, f := range []string{h.sendApp, h.sendFac, h.recvApp, h.recvFac,
		ackTime(now(), sep), "", msgType, NewControlID(), h.procID, h.version} {
		b.WriteString(fs + f)
	}
	if h.charset != "" {
		b.WriteString(strings.Repeat(fs, 6) + h.charset) // MSH-13..17 empty
	}
	b.WriteByte('\r')

	reason = strings.TrimSpace(reason)
	b.WriteString("MSA" + fs + esc(string(code)) + fs + h.control)
	// MSA-3 is left out only for a version known to be v2.7 or later: a
	// sender whose version cannot be read may read the reason there alone.
	if reason != "" && !versionFrom(h.versionN, 2, 7, 0) {
		b.WriteString(fs + esc(textcut.Cut(reason, maxShortText)))
	}
	b.WriteByte('\r')

	if reason != "" {
		text := esc(textcut.Cut(reason, maxReason))
		code := strconv.Itoa(int(cond))
		if versionBefore(h.versionN, 2, 5, 0) {
			b.WriteString("ERR" + fs + cs + cs + cs + code)
			if sep.Subcomponent != 0 { // else the CE has no room for text: MSA-3 has it
				b.WriteString(ss + text + ss + "HL70357")
			}
		} else {
			severity := "E"
			if cond == CondAccepted {
				severity = "I"
			}
			b.WriteString("ERR" + fs + fs + fs + code + cs + esc(cond.String()) + cs + "HL70357" +
				fs + severity + fs + fs + fs + fs + text)
		}
		b.WriteByte('\r')
	}
	return []byte(b.String())
}

// ackTime formats t as MSH-7 (DTM) with its UTC offset, or without it
// when the offset's sign is one of sep's delimiters: HL7 lets any
// non-alphanumeric character be a delimiter, and a '+' or '-' field
// separator would otherwise split the timestamp and shift every later MSH
// field (the ACK's message type and control ID among them). The offset is
// optional in a DTM; an escape sequence inside a timestamp would be read by
// few receivers.
func ackTime(t time.Time, sep Separators) string {
	ts := t.Format("20060102150405-0700")
	sign := ts[len(ts)-5]
	for _, d := range []byte{sep.Field, sep.Component, sep.Repetition, sep.Escape, sep.Subcomponent, sep.Truncation} {
		if d == sign {
			return ts[:len(ts)-5]
		}
	}
	return ts
}

// versionBefore reports whether the version ID v (MSH-12.1, e.g. "2.4",
// "2.5.1") is a readable version older than major.minor.patch. An empty or
// unreadable version is taken to be recent: false.
func versionBefore(v string, major, minor, patch int) bool {
	n, ok := parseVersion(v)
	return ok && slices.Compare(n[:], []int{major, minor, patch}) < 0
}

// versionFrom reports whether the version ID v is a readable version of
// major.minor.patch or later. An empty or unreadable version is not: false.
func versionFrom(v string, major, minor, patch int) bool {
	n, ok := parseVersion(v)
	return ok && slices.Compare(n[:], []int{major, minor, patch}) >= 0
}

// parseVersion reads a version ID such as "2.4" or "2.5.1".
func parseVersion(v string) ([3]int, bool) {
	var n [3]int
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return n, false
	}
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 || len(p) > 3 {
			return n, false
		}
		n[i] = x
	}
	return n, true
}

// Acknowledgment is what ParseAck reads from an acknowledgment.
type Acknowledgment struct {
	// Code is MSA-1.
	Code AckCode
	// ControlID is MSA-2, raw: the control ID of the message acknowledged.
	ControlID string
	// Text is MSA-3, unescaped.
	Text string
	// ErrorCode is the first ERR segment's condition (ERR-3.1, or ERR-1.4.1
	// before v2.5), or "".
	ErrorCode string
	// ErrorMessage gathers the ERR segments' messages, unescaped, joined
	// with "; ": ERR-8 (user message), else the text of ERR-3 or ERR-1.4.
	ErrorMessage string
}

// ErrNotAck is wrapped by ParseAck's error when a parsed message is not an
// acknowledgment.
var ErrNotAck = errors.New("hl7: not an acknowledgment")

// maxAckErrors bounds the ERR segments an ACK is read for (ParseAckTo).
const maxAckErrors = 32

// ParseAck reads an acknowledgment (the payload of an MLLP frame answering a
// message): any message with an MSH and an MSA segment whose MSA-1 is an
// acknowledgment code. Parse's errors are returned as they are.
func ParseAck(b []byte) (Acknowledgment, error) {
	return ParseAckTo(b, nil)
}

// ParseAckTo is ParseAck for the reply to sent (nil: none known): a reply
// that declares no character set (MSH-18 empty) is read in sent's, whose
// control id it echoes byte for byte. Read byte by byte, the reply to a
// BIG-5 message whose control id ends in 院 (B0 7C) named B0 alone, never
// the message, which was then sent again for ever.
func ParseAckTo(b []byte, sent *Message) (Acknowledgment, error) {
	m, err := Parse(b)
	if err != nil {
		return Acknowledgment{}, err
	}
	if sent != nil && m.sep.scan == scanBytes && sent.sep.scan != scanBytes {
		if f, _ := m.field("MSH", 1, 18); len(bytes.TrimSpace(f)) == 0 {
			m.sep.scan = sent.sep.scan
		}
	}
	if m.segment("MSA", 1) == nil {
		return Acknowledgment{}, fmt.Errorf("%w: no MSA segment", ErrNotAck)
	}
	get := func(p Path) string { return m.Get(p) }
	text := func(p Path) string { return Unescape(m.Get(p), m.sep) }
	control, _ := m.field("MSA", 1, 2) // whole, as Message.ControlID
	a := Acknowledgment{
		Code:      AckCode(get(Path{Segment: "MSA", Field: 1})),
		ControlID: string(control),
		Text:      text(Path{Segment: "MSA", Field: 3}),
	}
	if !a.Code.Valid() {
		return Acknowledgment{}, fmt.Errorf("%w: MSA-1 %q is not one of AA, AE, AR, CA, CE, CR", ErrNotAck, textcut.Cut(string(a.Code), 8))
	}
	var msgs []string
	// The first maxAckErrors ERR segments: an ACK carries a handful, and
	// each read finds its segment from the start (Message keeps no index),
	// so a reply of many thousands would cost time quadratic in its size.
	for i := 1; i <= maxAckErrors && m.segment("ERR", i) != nil; i++ {
		code := get(Path{Segment: "ERR", Occurrence: i, Field: 3, Component: 1})
		msg := text(Path{Segment: "ERR", Occurrence: i, Field: 8})
		if code == "" { // pre-v2.5 layout: ERR-1.4 is a CE in subcomponents
			code = get(Path{Segment: "ERR", Occurrence: i, Field: 1, Component: 4, Subcomponent: 1})
			if msg == "" {
				msg = text(Path{Segment: "ERR", Occurrence: i, Field: 1, Component: 4, Subcomponent: 2})
			}
		}
		if msg == "" {
			msg = text(Path{Segment: "ERR", Occurrence: i, Field: 3, Component: 2})
		}
		if a.ErrorCode == "" {
			a.ErrorCode = code
		}
		if msg != "" {
			msgs = append(msgs, msg)
		}
	}
	a.ErrorMessage = strings.Join(msgs, "; ")
	return a, nil
}

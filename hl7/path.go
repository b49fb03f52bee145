package hl7

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadPath is wrapped by ParsePath's errors.
var ErrBadPath = errors.New("hl7: bad field path")

// maxPathNumber bounds every number in a path; no segment has that many
// fields, nor a field that many repetitions or components.
const maxPathNumber = 9999

// Path locates a value in a message: a field, or one repetition, component
// or subcomponent of it. All numbers are 1-based. The zero value of
// Occurrence and Repetition means the first; the zero value of Component
// means the whole repetition, and of Subcomponent the whole component.
type Path struct {
	Segment      string // three characters, e.g. "PID"
	Occurrence   int    // which PID (SEG[n]); 0 or 1 is the first
	Field        int    // PID-3
	Repetition   int    // PID-3[2]; 0 or 1 is the first
	Component    int    // PID-3.1; 0 is the whole repetition
	Subcomponent int    // PID-3.4.1; 0 is the whole component
}

// ParsePath parses a field path:
//
//	SEG-F          field F of the first SEG, its first repetition, raw
//	SEG-F.C        component C of it
//	SEG-F.C.S      subcomponent S of that component
//	SEG[N]-F...    the same in the N-th SEG of the message
//	SEG-F[R]...    the same in the R-th repetition of the field
//
// SEG is three upper-case letters or digits, starting with a letter (PID,
// PV1, ZPI); every number is a decimal from 1 to 9999. MSH is numbered as
// the standard does: MSH-1 is the field separator, MSH-2 the encoding
// characters, MSH-3 the sending application. The Path returned always has
// Occurrence and Repetition set (1 when not given). ParsePath is meant for
// configuration: its errors name the path and say what is wrong with it.
func ParsePath(s string) (Path, error) {
	bad := func(format string, args ...any) (Path, error) {
		return Path{}, fmt.Errorf("%w %q: %s", ErrBadPath, s, fmt.Sprintf(format, args...))
	}
	var p Path
	if len(s) < 3 {
		return bad("want SEG-F, SEG-F.C or SEG-F.C.S, e.g. PID-3.1")
	}
	seg := s[:3]
	if !isUpper(seg[0]) || !(isUpper(seg[1]) || isDigit(seg[1])) || !(isUpper(seg[2]) || isDigit(seg[2])) {
		return bad("segment %q must be three upper-case letters or digits starting with a letter, e.g. PID", seg)
	}
	p.Segment = seg
	rest := s[3:]

	// number reads a decimal at the start of rest, naming it what in errors.
	number := func(what string) (int, error) {
		i := 0
		for i < len(rest) && isDigit(rest[i]) {
			i++
		}
		if i == 0 {
			if rest == "" {
				return 0, fmt.Errorf("%w %q: %s number missing at the end", ErrBadPath, s, what)
			}
			return 0, fmt.Errorf("%w %q: want a %s number, found %q", ErrBadPath, s, what, rest[:1])
		}
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n > maxPathNumber {
			return 0, fmt.Errorf("%w %q: %s number %s is too large (at most %d)", ErrBadPath, s, what, rest[:i], maxPathNumber)
		}
		if n == 0 {
			return 0, fmt.Errorf("%w %q: %s numbers start at 1", ErrBadPath, s, what)
		}
		rest = rest[i:]
		return n, nil
	}
	// index reads an optional [n] at the start of rest.
	index := func(what string) (int, error) {
		if !strings.HasPrefix(rest, "[") {
			return 0, nil
		}
		rest = rest[1:]
		n, err := number(what)
		if err != nil {
			return 0, err
		}
		if !strings.HasPrefix(rest, "]") {
			return 0, fmt.Errorf("%w %q: missing ] after the %s number", ErrBadPath, s, what)
		}
		rest = rest[1:]
		return n, nil
	}

	var err error
	if p.Occurrence, err = index("segment occurrence"); err != nil {
		return Path{}, err
	}
	if !strings.HasPrefix(rest, "-") {
		if rest == "" {
			return bad("no field: want %s-F, e.g. %s-3", seg, seg)
		}
		return bad("want '-' and a field number after %q, found %q", s[:len(s)-len(rest)], rest[:1])
	}
	rest = rest[1:]
	if p.Field, err = number("field"); err != nil {
		return Path{}, err
	}
	if p.Repetition, err = index("repetition"); err != nil {
		return Path{}, err
	}
	if strings.HasPrefix(rest, ".") {
		rest = rest[1:]
		if p.Component, err = number("component"); err != nil {
			return Path{}, err
		}
		if strings.HasPrefix(rest, ".") {
			rest = rest[1:]
			if p.Subcomponent, err = number("subcomponent"); err != nil {
				return Path{}, err
			}
		}
	}
	if rest != "" {
		return bad("unexpected %q after %q", rest, s[:len(s)-len(rest)])
	}
	p.Occurrence, p.Repetition = max(p.Occurrence, 1), max(p.Repetition, 1)
	return p, nil
}

// MustParsePath is ParsePath for paths known to be valid; it panics on an
// error.
func MustParsePath(s string) Path {
	p, err := ParsePath(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String returns the path in ParsePath's syntax, leaving out the defaults
// (first occurrence, first repetition): ParsePath(p.String()) == p for any
// path ParsePath returned.
func (p Path) String() string {
	var b strings.Builder
	b.WriteString(p.Segment)
	if p.Occurrence > 1 {
		fmt.Fprintf(&b, "[%d]", p.Occurrence)
	}
	fmt.Fprintf(&b, "-%d", p.Field)
	if p.Repetition > 1 {
		fmt.Fprintf(&b, "[%d]", p.Repetition)
	}
	if p.Component > 0 {
		fmt.Fprintf(&b, ".%d", p.Component)
		if p.Subcomponent > 0 {
			fmt.Fprintf(&b, ".%d", p.Subcomponent)
		}
	}
	return b.String()
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

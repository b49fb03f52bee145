package hl7

import "testing"

func TestEscape(t *testing.T) {
	t.Parallel()
	trunc := DefaultSeparators
	trunc.Truncation = '#'
	custom := Separators{Field: '#', Component: '$', Repetition: '*', Escape: '@', Subcomponent: '%'}
	tests := []struct {
		in  string
		sep Separators
		out string
	}{
		{"plain text", DefaultSeparators, "plain text"},
		{"", DefaultSeparators, ""},
		{`a|b^c~d\e&f`, DefaultSeparators, `a\F\b\S\c\R\d\E\e\T\f`},
		{"line1\rline2\nx\ty\x0bz\x1c", DefaultSeparators, "line1 line2 x y z "},
		{"no #1", DefaultSeparators, "no #1"},
		{"no #1", trunc, `no \P\1`},
		{"a#b$c*d@e%f|g", custom, "a@F@b@S@c@R@d@E@e@T@f|g"},
		{"naïve café", DefaultSeparators, "naïve café"},
	}
	for _, tt := range tests {
		if got := Escape(tt.in, tt.sep); got != tt.out {
			t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.out)
		}
	}
}

func TestUnescape(t *testing.T) {
	t.Parallel()
	trunc := DefaultSeparators
	trunc.Truncation = '#'
	tests := []struct {
		in  string
		sep Separators
		out string
	}{
		{"plain", DefaultSeparators, "plain"},
		{`a\F\b\S\c\R\d\E\e\T\f`, DefaultSeparators, `a|b^c~d\e&f`},
		{`\P\`, DefaultSeparators, `\P\`}, // no truncation character: left alone
		{`\P\`, trunc, "#"},
		{`CR\X0D\LF\X0a\`, DefaultSeparators, "CR\rLF\n"},
		{`bad hex \XZZ\ odd \X0\`, DefaultSeparators, `bad hex \XZZ\ odd \X0\`},
		{`line\.br\next \H\bold\N\`, DefaultSeparators, `line\.br\next \H\bold\N\`},
		{`unterminated \F`, DefaultSeparators, `unterminated \F`},
		{`\\`, DefaultSeparators, `\\`},
		{`\F\\S\`, DefaultSeparators, "|^"},
	}
	for _, tt := range tests {
		if got := Unescape(tt.in, tt.sep); got != tt.out {
			t.Errorf("Unescape(%q) = %q, want %q", tt.in, got, tt.out)
		}
	}
}

func TestEscapeRoundTrip(t *testing.T) {
	t.Parallel()
	sep := DefaultSeparators
	sep.Truncation = '#'
	for _, s := range []string{`|^~\&#`, `\F\ literally`, `C:\path\to\file`, "x\\", "\\X41\\"} {
		if got := Unescape(Escape(s, sep), sep); got != s {
			t.Errorf("Unescape(Escape(%q)) = %q", s, got)
		}
	}
}

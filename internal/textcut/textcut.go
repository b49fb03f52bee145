// Package textcut cuts text to a size in bytes without splitting a UTF-8
// character, for the fields that bound what they keep (a stored error, a
// lane name, an ACK's text).
package textcut

import "unicode/utf8"

// Cut returns s cut to at most n bytes, at a character boundary.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

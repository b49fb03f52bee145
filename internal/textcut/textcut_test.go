package textcut_test

import (
	"testing"

	"github.com/messagefoundry/mf/internal/textcut"
)

func TestCutKeepsWholeCharacters(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 2, "ab"},
		{"aé", 2, "a"}, // é is 2 bytes: not split
		{"aé", 3, "aé"},
		{"é", 0, ""},
	} {
		if got := textcut.Cut(tc.s, tc.n); got != tc.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

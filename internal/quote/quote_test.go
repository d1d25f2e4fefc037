package quote

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestQ(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"abc", `"abc"`},
		{strings.Repeat("x", 64), `"` + strings.Repeat("x", 64) + `"`},
		{strings.Repeat("x", 65), `"` + strings.Repeat("x", 64) + `…"(65 bytes)`},
		{strings.Repeat("é", 40), `"` + strings.Repeat("é", 32) + `…"(80 bytes)`},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, Q(tc.in)); diff != "" {
			t.Errorf("Q(%d bytes) (-want +got):\n%s", len(tc.in), diff)
		}
	}
	big := strings.Repeat("9", 1<<20)
	if got := Q(big); len(got) > 100 {
		t.Errorf("Q of 1 MB = %d bytes", len(got))
	}
}

func FuzzQ(f *testing.F) {
	f.Add("abc")
	f.Add(strings.Repeat("é", 40))
	f.Fuzz(func(t *testing.T, s string) {
		q := Q(s)
		if len(q) > 4*Max+40 {
			t.Fatalf("Q(%d bytes) = %d bytes", len(s), len(q))
		}
		m := Message(s, 100)
		if len(m) > 100+40 || (utf8.ValidString(s) && !utf8.ValidString(m)) {
			t.Fatalf("Message(%d bytes) = %d bytes, valid %v", len(s), len(m), utf8.ValidString(m))
		}
	})
}

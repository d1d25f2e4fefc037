package cursor

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const testVersion = 7

func TestOpenRefuses(t *testing.T) {
	payload := []byte("0123456789ab") // 12 bytes: 17 in all, 23 characters with 2 spare bits
	good := Seal(testVersion, payload)
	// The last character carries 4 bits of the checksum and 2 spare bits; setting a spare bit
	// keeps the decoded bytes of a lax decoder the same.
	last := strings.IndexByte(alphabet, good[len(good)-1])
	spare := good[:len(good)-1] + string(alphabet[last|1])
	if spare == good {
		spare = good[:len(good)-1] + string(alphabet[last|2])
	}
	for _, tc := range []struct {
		name, s string
		n       int
		want    string
	}{
		{"empty", "", len(payload), "0 characters"},
		{"spare bits set", spare, len(payload), "not canonical"},
		{"newline inside", good[:5] + "\n" + good[6:], len(payload), "character 5"},
		{"carriage return", good[:len(good)-1] + "\r", len(payload), "character 22"},
		{"padding", good[:len(good)-1] + "=", len(payload), "character 22"},
		{"standard alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(Seal(testVersion, []byte{0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe})), len(payload), "not base64url"},
		{"too long", good + "AAAA", len(payload), "27 characters"},
		{"other length", Seal(testVersion, payload[:9]), len(payload), "characters, want 23"},
		{"other version", Seal(testVersion+1, payload), len(payload), "version 8, want 7"},
		{"checksum", Seal(testVersion, payload)[:4] + flip(good[4]) + good[5:], len(payload), "checksum mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.s, testVersion, tc.n)
			if err == nil {
				t.Fatalf("Open(%q) accepted", tc.s)
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%q) = %v, want ErrMalformed mentioning %q", tc.s, err, tc.want)
			}
		})
	}
}

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func flip(c byte) string {
	i := strings.IndexByte(alphabet, c)
	return string(alphabet[i^1])
}

func TestRoundTrip(t *testing.T) {
	for n := range 40 {
		p := bytes.Repeat([]byte{byte(n)}, n)
		s := Seal(3, p)
		if len(s) != EncodedLen(n) {
			t.Errorf("payload %d: cursor of %d characters, EncodedLen says %d", n, len(s), EncodedLen(n))
		}
		got, err := Open(s, 3, n)
		if err != nil {
			t.Fatalf("payload %d: %v", n, err)
		}
		if diff := cmp.Diff(p, got); diff != "" {
			t.Errorf("payload %d (-sealed +opened):\n%s", n, diff)
		}
	}
}

// FuzzOpen: Open never panics, every error wraps ErrMalformed, and a string it accepts is the
// one Seal makes of the payload: each payload has one cursor.
func FuzzOpen(f *testing.F) {
	f.Add(Seal(1, []byte("payload-of-16-by")), 16)
	f.Add(Seal(1, nil), 0)
	f.Add("AQ", 0)
	f.Add("", 3)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 || n > 64 {
			return
		}
		p, err := Open(s, 1, n)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if back := Seal(1, p); back != s {
			t.Fatalf("cursor %q opens to %x, which seals to %q", s, p, back)
		}
	})
}

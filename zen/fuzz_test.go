package zen_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
)

// FuzzParseID: ParseID never panics, accepts only valid IDs, and round-trips through String.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"241294492511762325", "68719476737", "4611686018427387903", "4611686018427387904", "0", "1", "-1", "", "abc", "18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := zen.ParseID(s)
		if err != nil {
			return
		}
		if !id.Valid() || uint64(id)>>62 != 0 || id.Type() == 0 {
			t.Fatalf("ParseID(%q) accepted invalid %d", s, id)
		}
		back, err := zen.NewID(id.Shard(), id.Type(), id.Local())
		if err != nil || back != id {
			t.Fatalf("NewID(parts of %d) = %d, %v", id, back, err)
		}
		again, err := zen.ParseID(id.String())
		if err != nil || again != id {
			t.Fatalf("ParseID(String(%d)) = %d, %v", id, again, err)
		}
	})
}

// FuzzScore: DecodeScore never panics; what it accepts re-encodes to the same bytes; what
// EncodeScore accepts decodes to the same number and keeps order against 0.
func FuzzScore(f *testing.F) {
	f.Add([]byte{0x80, 0, 0, 0, 0, 0, 0, 0}, 0.0)
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, math.Copysign(0, -1))
	f.Add([]byte{0xff, 0xf8, 0, 0, 0, 0, 0, 0}, math.Inf(1))
	f.Add([]byte{0xbf, 0xf0, 0, 0, 0, 0, 0, 0}, -1.0)
	f.Add([]byte{1, 2, 3}, 0.93)
	f.Fuzz(func(t *testing.T, b []byte, x float64) {
		if v, err := zen.DecodeScore(b); err == nil {
			enc, err := zen.EncodeScore(v)
			if err != nil || !bytes.Equal(enc[:], b) {
				t.Fatalf("DecodeScore(%x) = %v, re-encodes to %x, %v", b, v, enc, err)
			}
		}
		enc, err := zen.EncodeScore(x)
		if math.IsNaN(x) {
			if err == nil {
				t.Fatal("EncodeScore(NaN) accepted")
			}
			return
		}
		if err != nil {
			t.Fatalf("EncodeScore(%v): %v", x, err)
		}
		back, err := zen.DecodeScore(enc[:])
		if err != nil || back != x || math.Signbit(back) && back == 0 {
			t.Fatalf("round trip %v -> %x -> %v, %v", x, enc, back, err)
		}
		zero, _ := zen.EncodeScore(0)
		if c := bytes.Compare(enc[:], zero[:]); (c < 0) != (x < 0) || (c == 0) != (x == 0) {
			t.Fatalf("order against 0 broken for %v", x)
		}
	})
}

// FuzzPoolKey: ParsePoolKey never panics and what it accepts rebuilds byte for byte.
func FuzzPoolKey(f *testing.F) {
	user, _ := zen.ParseID("241294629943640797")
	pin, _ := zen.ParseID("241294492511762325")
	for _, s := range []float64{1, 0.93, 0.5, -0.1, 0, math.Inf(-1)} {
		k, _ := zen.PoolKey(user, zen.SourceFollowing, s, pin)
		f.Add(k)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 25))
	f.Fuzz(func(t *testing.T, k []byte) {
		u, src, score, p, err := zen.ParsePoolKey(k)
		if err != nil {
			return
		}
		back, err := zen.PoolKey(u, src, score, p)
		if err != nil || !bytes.Equal(back, k) {
			t.Fatalf("ParsePoolKey(%x) -> %d %d %v %d rebuilds %x, %v", k, u, src, score, p, back, err)
		}
	})
}

// FuzzCursor: decoding never panics; what decodes re-encodes to the same string.
func FuzzCursor(f *testing.F) {
	u, _ := zen.ParseID("241294629943640797")
	pin, _ := zen.ParseID("241294492511762325")
	f.Add(zen.EncodeCursorForTest(u, zen.EdgeUserLikes, true, seq.FromMillis(1700000000000), pin))
	f.Add(zen.EncodeCursorForTest(u, zen.EdgeFollowsUser, false, seq.Max, u))
	f.Add("")
	f.Add("AAAA")
	f.Add("!!!")
	f.Fuzz(func(t *testing.T, s string) {
		from, et, newest, sq, to, err := zen.DecodeCursorForTest(s)
		if err != nil {
			return
		}
		if back := zen.EncodeCursorForTest(from, et, newest, sq, to); back != s {
			t.Fatalf("cursor %q decodes and re-encodes to %q", s, back)
		}
	})
}

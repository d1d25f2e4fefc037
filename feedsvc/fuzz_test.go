package feedsvc

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

// fuzzUser is any ID: a cursor only compares it.
const fuzzUser = zen.ID(0x1c0300000001)

func FuzzDecodeCursor(f *testing.F) {
	f.Add(encodeCursor(fuzzUser, position{Seq: 3, Pos: 2}))
	f.Add("")
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := decodeCursor(fuzzUser, s)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("error %v does not wrap ErrBadCursor", err)
			}
			return
		}
		if got := encodeCursor(fuzzUser, p); got != s {
			t.Fatalf("cursor %q decodes to %+v, which encodes to %q", s, p, got)
		}
	})
}

func FuzzDecodePending(f *testing.F) {
	f.Add(encodePending(pendingChunk{ChunkID: "c1", ServedMs: 5, Pos: []uint32{0, 2},
		Items: []Item{{Pin: 1, Source: 1, Score: 0.5, Reason: "r"}, {Pin: 2}}}))
	f.Add(encodePending(pendingChunk{ChunkID: "c2", ServedMs: 7, Prepared: true, Owner: 0xfeed, Pos: []uint32{1},
		Items: []Item{{Pin: 3}}}))
	f.Add([]byte{pendingVersion})
	f.Add([]byte{pendingVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{ownedPreparedVersion, 0, 0, 0, 0, 0, 0, 0, 0}) // owner 0: corrupt
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodePending(b)
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("error %v does not wrap errCorrupt", err)
			}
			return
		}
		if got := encodePending(c); !bytes.Equal(got, b) {
			// Varints have one canonical encoding only when minimal; accept a re-encoding that
			// decodes to the same chunk.
			again, err := decodePending(got)
			if err != nil {
				t.Fatalf("re-encoding does not decode: %v", err)
			}
			if diff := cmp.Diff(c, again, cmp.AllowUnexported(pendingChunk{}), cmp.Comparer(sameFloat)); diff != "" {
				t.Fatalf("round trip (-first +second):\n%s", diff)
			}
		}
	})
}

func FuzzDecodeItem(f *testing.F) {
	f.Add(encodeItem(Item{Pin: 9, Source: 2, Score: -1, Author: 3, Board: 4, Reason: "interest"}))
	f.Add([]byte{itemVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		it, err := decodeItem(b)
		if err != nil {
			return
		}
		again, err := decodeItem(encodeItem(it))
		if err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
		if diff := cmp.Diff(it, again, cmp.Comparer(sameFloat)); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// sameFloat compares bit patterns, so NaN equals NaN.
func sameFloat(a, b float64) bool { return a == b || (a != a && b != b) }

func TestCursorRoundTrip(t *testing.T) {
	for _, p := range []position{{Seq: 1}, {Seq: 1 << 63, Pos: 1<<32 - 1}} {
		got, err := decodeCursor(fuzzUser, encodeCursor(fuzzUser, p))
		if err != nil || got != p {
			t.Errorf("round trip of %+v = %+v, %v", p, got, err)
		}
	}
	if _, err := decodeCursor(fuzzUser, encodeCursor(fuzzUser, position{})); !errors.Is(err, ErrBadCursor) {
		t.Errorf("sequence 0 accepted: %v", err)
	}
}

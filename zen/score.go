package zen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// EncodeScore returns the order-preserving 8-byte encoding of f (the FDB tuple / HBase
// FIXED_FLOAT64 transform): bytes.Compare on encodings equals numeric order. −0 is encoded as +0;
// NaN is refused.
func EncodeScore(f float64) ([8]byte, error) {
	var b [8]byte
	if math.IsNaN(f) {
		return b, errors.New("encode score: NaN")
	}
	if f == 0 {
		f = 0 // canonicalise −0
	}
	u := math.Float64bits(f)
	if u&(1<<63) != 0 {
		u = ^u
	} else {
		u ^= 1 << 63
	}
	binary.BigEndian.PutUint64(b[:], u)
	return b, nil
}

// DecodeScore inverts EncodeScore. It refuses input that is not 8 bytes, encodes NaN, or is the
// non-canonical encoding of −0.
func DecodeScore(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("decode score: %d bytes, want 8", len(b))
	}
	u := binary.BigEndian.Uint64(b)
	if u&(1<<63) != 0 {
		u ^= 1 << 63
	} else {
		u = ^u
	}
	f := math.Float64frombits(u)
	if math.IsNaN(f) {
		return 0, fmt.Errorf("decode score %x: NaN", b)
	}
	if f == 0 && math.Signbit(f) {
		return 0, fmt.Errorf("decode score %x: non-canonical -0", b)
	}
	return f, nil
}

// Package seq implements the 128-bit ordering sequences of zen's edges and ordered lists:
// creation milliseconds × 10^25 in an unsigned 128-bit number (38 decimal digits, DECIMAL(38)
// compatible), written to tables as 16 big-endian bytes so that byte order is numeric order.
// A move between two neighbours takes the floor of their midpoint: one row write per move.
package seq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"math/bits"
)

// Seq is an unsigned 128-bit sequence number.
type Seq struct{ Hi, Lo uint64 }

// Size is the encoded width of a Seq in bytes.
const Size = 16

var (
	// ErrNoGap means two neighbours are adjacent: there is no integer strictly between them.
	ErrNoGap = errors.New("seq: no gap between neighbours")
	// ErrOrder means the lower neighbour is not below the upper one.
	ErrOrder = errors.New("seq: neighbours out of order")
)

// Unit is 10^25, one millisecond of creation time.
var Unit = Seq{Hi: 542101, Lo: 1590897978359414784}

// Max is the largest valid sequence, 10^38 − 1.
var Max = Seq{Hi: 5421010862427522170, Lo: 687399551400673279}

// FromMillis returns ms × 10^25. Negative ms gives zero.
func FromMillis(ms int64) Seq {
	if ms <= 0 {
		return Seq{}
	}
	// ms × 10^6 fits in 64 bits for any realistic ms (< 1.8e13); then × 10^19.
	hi, lo := bits.Mul64(uint64(ms)*1_000_000, 10_000_000_000_000_000_000)
	return Seq{Hi: hi, Lo: lo}
}

// Cmp returns -1, 0 or 1 as s is below, equal to or above o.
func (s Seq) Cmp(o Seq) int {
	switch {
	case s.Hi < o.Hi:
		return -1
	case s.Hi > o.Hi:
		return 1
	case s.Lo < o.Lo:
		return -1
	case s.Lo > o.Lo:
		return 1
	}
	return 0
}

// Add returns s + o, wrapping at 2^128.
func (s Seq) Add(o Seq) Seq {
	lo, c := bits.Add64(s.Lo, o.Lo, 0)
	hi, _ := bits.Add64(s.Hi, o.Hi, c)
	return Seq{Hi: hi, Lo: lo}
}

// Sub returns s − o, wrapping at 2^128.
func (s Seq) Sub(o Seq) Seq {
	lo, b := bits.Sub64(s.Lo, o.Lo, 0)
	hi, _ := bits.Sub64(s.Hi, o.Hi, b)
	return Seq{Hi: hi, Lo: lo}
}

// Half returns floor(s / 2).
func (s Seq) Half() Seq { return Seq{Hi: s.Hi >> 1, Lo: s.Lo>>1 | s.Hi<<63} }

// Between returns floor((lo+hi)/2), strictly between lo and hi, or ErrNoGap / ErrOrder.
func Between(lo, hi Seq) (Seq, error) {
	if lo.Cmp(hi) >= 0 {
		return Seq{}, fmt.Errorf("between %s and %s: %w", lo, hi, ErrOrder)
	}
	gap := hi.Sub(lo)
	if gap.Hi == 0 && gap.Lo < 2 {
		return Seq{}, fmt.Errorf("between %s and %s: %w", lo, hi, ErrNoGap)
	}
	return lo.Add(gap.Half()), nil
}

// Gap returns hi − lo (callers ensure lo ≤ hi).
func Gap(lo, hi Seq) Seq { return hi.Sub(lo) }

// Spread returns n values evenly spaced strictly inside (lo, hi), ascending, or ErrNoGap when
// the interval has fewer than n interior integers.
func Spread(n int, lo, hi Seq) ([]Seq, error) {
	if n <= 0 {
		return nil, nil
	}
	if lo.Cmp(hi) >= 0 {
		return nil, fmt.Errorf("spread %d in (%s, %s): %w", n, lo, hi, ErrOrder)
	}
	l, h := lo.Big(), hi.Big()
	step := new(big.Int).Sub(h, l)
	step.Quo(step, big.NewInt(int64(n)+1))
	if step.Sign() == 0 {
		return nil, fmt.Errorf("spread %d in (%s, %s): %w", n, lo, hi, ErrNoGap)
	}
	out := make([]Seq, n)
	cur := new(big.Int).Set(l)
	for i := range out {
		cur.Add(cur, step)
		out[i] = FromBig(cur)
	}
	return out, nil
}

// Big returns s as a big.Int.
func (s Seq) Big() *big.Int {
	b := s.Key()
	return new(big.Int).SetBytes(b[:])
}

// FromBig converts a non-negative big.Int below 2^128.
func FromBig(b *big.Int) Seq {
	var buf [Size]byte
	b.FillBytes(buf[:])
	return FromKey(buf[:])
}

// String returns the decimal form.
func (s Seq) String() string { return s.Big().String() }

// Parse reads the decimal form, refusing values above Max.
func Parse(str string) (Seq, error) {
	b, ok := new(big.Int).SetString(str, 10)
	if !ok || b.Sign() < 0 || b.Cmp(Max.Big()) > 0 {
		return Seq{}, fmt.Errorf("parse sequence %q: not a decimal in [0, 10^38)", str)
	}
	return FromBig(b), nil
}

// Key returns the 16-byte big-endian encoding; bytes.Compare on keys equals Cmp.
func (s Seq) Key() [Size]byte {
	var b [Size]byte
	binary.BigEndian.PutUint64(b[:8], s.Hi)
	binary.BigEndian.PutUint64(b[8:], s.Lo)
	return b
}

// AppendKey appends the 16-byte encoding to dst.
func (s Seq) AppendKey(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, s.Hi)
	return binary.BigEndian.AppendUint64(dst, s.Lo)
}

// FromKey decodes 16 big-endian bytes (callers check the length; shorter input panics).
func FromKey(b []byte) Seq {
	return Seq{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:16])}
}

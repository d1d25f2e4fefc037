// Package binrec reads the binary rows the services store (the feed's items and pending chunks,
// the generator's chunk records): big-endian fixed-width integers, varints and length-prefixed
// bytes. The first short or bad field sets the Reader's error and every later read returns
// zero, so a decoder reads a whole row and checks Err once.
package binrec

import (
	"encoding/binary"
	"fmt"
)

// Reader reads fields from the front of a row. The zero value reads nothing; make one with New.
type Reader struct {
	b   []byte
	err error
	bad error
}

// New returns a Reader of b whose errors wrap bad (the decoder's corruption error).
func New(b []byte, bad error) Reader { return Reader{b: b, bad: bad} }

// Err is the first error met, nil if every field so far was whole.
func (r *Reader) Err() error { return r.err }

// Len is the number of bytes not read yet.
func (r *Reader) Len() int { return len(r.b) }

// Fail sets the error to err unless one is set already; nothing more is read after it.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

// short fails the read of the field what.
func (r *Reader) short(what string) {
	if r.err == nil {
		r.Fail(fmt.Errorf("%w: short or bad %s", r.bad, what))
	}
}

// U8 reads one byte.
func (r *Reader) U8(what string) byte {
	if r.err != nil || len(r.b) < 1 {
		r.short(what)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// U64 reads a big-endian 8-byte integer.
func (r *Reader) U64(what string) uint64 {
	if r.err != nil || len(r.b) < 8 {
		r.short(what)
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// Varint reads a signed varint (binary.AppendVarint).
func (r *Reader) Varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.short(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Uvarint reads an unsigned varint no greater than limit.
func (r *Reader) Uvarint(what string, limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > limit {
		r.short(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Bytes reads the next n bytes; the slice shares the row's memory.
func (r *Reader) Bytes(what string, n uint64) []byte {
	if r.err != nil || uint64(len(r.b)) < n {
		r.short(what)
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// String reads a string written as its length (an unsigned varint, at most limit) and its bytes.
func (r *Reader) String(what string, limit uint64) string {
	return string(r.Bytes(what, r.Uvarint(what+" length", limit)))
}

// Package cursor is the one codec of SmartFeed's opaque page cursors (feed pages in feedsvc,
// edge pages in zen): a cursor is unpadded URL-safe base64 of version | payload | crc32, where
// the CRC-32 (IEEE) covers the version and the payload.
//
// Decoding is strict, so that each position has exactly one cursor: the base64 must be
// canonical (the spare bits of the last character are zero, no padding, no line breaks or other
// characters outside the URL-safe alphabet), the version must be the expected one, the payload
// must have its exact length and the checksum must match. A cursor that passes Open re-encodes,
// through Seal, to the same string.
package cursor

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// ErrMalformed is wrapped by every error of Open.
var ErrMalformed = errors.New("malformed cursor")

// enc is strict: it refuses non-zero spare bits in the last character. It still skips '\r' and
// '\n', which Open refuses before decoding.
var enc = base64.RawURLEncoding.Strict()

// Seal returns the cursor of payload under version.
func Seal(version byte, payload []byte) string {
	b := make([]byte, 0, 1+len(payload)+4)
	b = append(b, version)
	b = append(b, payload...)
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return enc.EncodeToString(b)
}

// EncodedLen is the length of the cursor Seal returns for a payload of n bytes.
func EncodedLen(n int) int { return enc.EncodedLen(1 + n + 4) }

// Open checks that s is a cursor sealed under version with a payload of exactly n bytes and
// returns the payload. Every error wraps ErrMalformed; its message never quotes s.
func Open(s string, version byte, n int) ([]byte, error) {
	if want := EncodedLen(n); len(s) != want {
		return nil, fmt.Errorf("%w: %d characters, want %d", ErrMalformed, len(s), want)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return nil, fmt.Errorf("%w: character %d is not base64url", ErrMalformed, i)
		}
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not canonical base64url", ErrMalformed)
	}
	if len(b) != 1+n+4 {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), 1+n+4)
	}
	if b[0] != version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrMalformed, b[0], version)
	}
	if crc32.ChecksumIEEE(b[:1+n]) != binary.BigEndian.Uint32(b[1+n:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrMalformed)
	}
	return b[1 : 1+n], nil
}

package feedsvc

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/smartfeed/smartfeed/zen"
)

// ErrBadCursor is wrapped by GetFeed for a cursor that is malformed, of an unknown version, or
// issued for another user.
var ErrBadCursor = errors.New("bad cursor")

const (
	cursorVersion = 1
	cursorLen     = 1 + 8 + 8 + 4 + 4 // version, user, seq, pos, crc32
)

// encodeCursor returns the opaque cursor after position p of user's feed: URL-safe base64 of
// version | user | seq | pos | crc32 of the rest.
func encodeCursor(user zen.ID, p position) string {
	b := make([]byte, 0, cursorLen)
	b = append(b, cursorVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(user))
	b = binary.BigEndian.AppendUint64(b, p.Seq)
	b = binary.BigEndian.AppendUint32(b, p.Pos)
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor checks and decodes a cursor issued by encodeCursor for user.
func decodeCursor(user zen.ID, s string) (position, error) {
	if len(s) > 2*cursorLen {
		return position{}, fmt.Errorf("%w: %d characters", ErrBadCursor, len(s))
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return position{}, fmt.Errorf("%w: not base64", ErrBadCursor)
	}
	if len(b) != cursorLen {
		return position{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadCursor, len(b), cursorLen)
	}
	if b[0] != cursorVersion {
		return position{}, fmt.Errorf("%w: version %d", ErrBadCursor, b[0])
	}
	if crc32.ChecksumIEEE(b[:cursorLen-4]) != binary.BigEndian.Uint32(b[cursorLen-4:]) {
		return position{}, fmt.Errorf("%w: checksum mismatch", ErrBadCursor)
	}
	if got := zen.ID(binary.BigEndian.Uint64(b[1:])); got != user {
		return position{}, fmt.Errorf("%w: issued for another user", ErrBadCursor)
	}
	p := position{Seq: binary.BigEndian.Uint64(b[9:]), Pos: binary.BigEndian.Uint32(b[17:])}
	if p.Seq == 0 {
		return position{}, fmt.Errorf("%w: sequence 0", ErrBadCursor)
	}
	return p, nil
}

package feedsvc

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/smartfeed/smartfeed/internal/cursor"
	"github.com/smartfeed/smartfeed/zen"
)

// ErrBadCursor is wrapped by GetFeed for a cursor that is malformed, of an unknown version, or
// issued for another user.
var ErrBadCursor = errors.New("bad cursor")

const (
	cursorVersion = 1
	cursorPayload = 8 + 8 + 4 // user, seq, pos
)

// encodeCursor returns the opaque cursor after position p of user's feed: the project's cursor
// codec (internal/cursor) over user | seq | pos.
func encodeCursor(user zen.ID, p position) string {
	b := make([]byte, 0, cursorPayload)
	b = binary.BigEndian.AppendUint64(b, uint64(user))
	b = binary.BigEndian.AppendUint64(b, p.Seq)
	b = binary.BigEndian.AppendUint32(b, p.Pos)
	return cursor.Seal(cursorVersion, b)
}

// decodeCursor checks and decodes a cursor issued by encodeCursor for user. Decoding is strict:
// each position has one cursor, and any other string is refused.
func decodeCursor(user zen.ID, s string) (position, error) {
	b, err := cursor.Open(s, cursorVersion, cursorPayload)
	if err != nil {
		return position{}, fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	if got := zen.ID(binary.BigEndian.Uint64(b)); got != user {
		return position{}, fmt.Errorf("%w: issued for another user", ErrBadCursor)
	}
	p := position{Seq: binary.BigEndian.Uint64(b[8:]), Pos: binary.BigEndian.Uint32(b[16:])}
	if p.Seq == 0 {
		return position{}, fmt.Errorf("%w: sequence 0", ErrBadCursor)
	}
	return p, nil
}

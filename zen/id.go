package zen

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"

	"github.com/smartfeed/smartfeed/internal/quote"
)

// ID is a Pinterest-style sharded 64-bit ID: shard<<46 | type<<36 | local, top two bits zero.
// The shard in the top bits makes an ID-led row key spread writes across shards.
type ID uint64

// Type is the 10-bit object type inside an ID.
type Type uint16

// Object types.
const (
	TypePin      Type = 1
	TypeBoard    Type = 2
	TypeUser     Type = 3
	TypeInterest Type = 4
)

// Layout limits of an ID.
const (
	MaxShard    = 1<<16 - 1 // largest shard number
	MaxType     = 1<<10 - 1 // largest type number
	MaxLocal    = 1<<36 - 1 // largest local ID
	MaxID    ID = 1<<62 - 1 // largest ID (top two bits zero)
)

// String returns the type's name ("pin", "board", "user", "interest") or "type N".
func (t Type) String() string {
	switch t {
	case TypePin:
		return "pin"
	case TypeBoard:
		return "board"
	case TypeUser:
		return "user"
	case TypeInterest:
		return "interest"
	}
	return "type " + strconv.Itoa(int(t))
}

// NewID composes an ID, refusing a type of 0 or ≥ 1024 and a local ID ≥ 2^36.
func NewID(shard uint16, t Type, local uint64) (ID, error) {
	if t == 0 || t > MaxType {
		return 0, fmt.Errorf("new id: type %d out of range [1, %d]", t, MaxType)
	}
	if local > MaxLocal {
		return 0, fmt.Errorf("new id: local %d out of range [0, %d]", local, uint64(MaxLocal))
	}
	return ID(uint64(shard)<<46 | uint64(t)<<36 | local), nil
}

// Shard returns the 16-bit shard.
func (id ID) Shard() uint16 { return uint16(id >> 46) }

// Type returns the 10-bit type.
func (id ID) Type() Type { return Type(id>>36) & MaxType }

// Local returns the 36-bit local ID.
func (id ID) Local() uint64 { return uint64(id) & MaxLocal }

// String returns the decimal form.
func (id ID) String() string { return strconv.FormatUint(uint64(id), 10) }

// Valid reports whether id has its reserved bits zero and a non-zero type.
func (id ID) Valid() bool { return id <= MaxID && id.Type() != 0 }

// ParseID reads the decimal form, refusing reserved bits and type 0.
func ParseID(s string) (ID, error) {
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse id %s: not a decimal uint64", quote.Q(s))
	}
	id := ID(u)
	if id > MaxID {
		return 0, fmt.Errorf("parse id %s: reserved top bits set", quote.Q(s))
	}
	if id.Type() == 0 {
		return 0, fmt.Errorf("parse id %s: %s", quote.Q(s), typeZero(id))
	}
	return id, nil
}

// typeZero says what is wrong with an ID of type 0, in words: what its type is, and what a
// valid ID's type is.
func typeZero(id ID) string {
	return fmt.Sprintf("ID %d has type 0 (none); an object's ID has type 1 (pin), 2 (board), 3 (user) or 4 (interest) "+
		"in bits 36-45 (`smartfeed id decode ID` shows its parts)", uint64(id))
}

// typeName is t's number with its name: "1 (pin)", "0 (none)", "9" for a type without a name.
func typeName(t Type) string {
	switch {
	case t == 0:
		return "0 (none)"
	case t >= TypePin && t <= TypeInterest:
		return fmt.Sprintf("%d (%s)", t, t)
	}
	return strconv.Itoa(int(t))
}

// WireID reads an ID that a message carries twice: as a number (a fixed64 field) and as its
// decimal string (the _str twin, for JSON clients whose numbers lose precision above 2^53).
// Either may be unset (0 or ""); when both are set they must agree. Neither set is the zero ID
// and no error: a caller that requires the ID checks for zero. A set ID must be Valid (reserved
// bits zero, a non-zero type); checking its type is the caller's (Check).
func WireID(n uint64, s string) (ID, error) {
	if s == "" {
		if id := ID(n); n != 0 && id > MaxID {
			return 0, fmt.Errorf("id %d is not a valid ID: its reserved top two bits are set", n)
		} else if n != 0 && id.Type() == 0 {
			return 0, errors.New(typeZero(id))
		}
		return ID(n), nil
	}
	id, err := ParseID(s)
	if err != nil {
		return 0, err
	}
	if n != 0 && uint64(id) != n {
		return 0, fmt.Errorf("id %d and id string %s disagree", n, quote.Q(s))
	}
	return id, nil
}

// Check returns an error naming the expected and actual type unless id is a valid ID of type want.
func (id ID) Check(want Type) error {
	if id > MaxID {
		return fmt.Errorf("id %d: reserved top bits set, want a %s id", uint64(id), want)
	}
	if got := id.Type(); got != want {
		return fmt.Errorf("ID %d has type %s; want a %s ID (type %d)", uint64(id), typeName(got), want, want)
	}
	return nil
}

// appendID appends the 8-byte big-endian form of id.
func appendID(dst []byte, id ID) []byte { return binary.BigEndian.AppendUint64(dst, uint64(id)) }

// ModShard maps a non-ID key (username, email, IP) to a shard in [0, n): the md5 digest read as a
// 128-bit big-endian integer, mod n. n ≤ 0 is treated as 4096.
func ModShard(key string, n int) int {
	if n <= 0 {
		n = 4096
	}
	d := md5.Sum([]byte(key))
	hi, lo := binary.BigEndian.Uint64(d[:8]), binary.BigEndian.Uint64(d[8:])
	// (hi·2^64 + lo) mod n = ((hi mod n)·2^64 + lo) mod n; bits.Rem64 computes that directly.
	return int(bits.Rem64(hi%uint64(n), lo, uint64(n)))
}

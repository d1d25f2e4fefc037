package zen

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/smartfeed/smartfeed/zen/seq"
)

const (
	tagOrder byte = 0x02

	intentNone    byte = 0
	intentMove    byte = 1 // written by earlier versions only; still finished when found
	intentRespace byte = 2

	stepLen     = 8 + 2*seq.Size
	overrideLen = 8 + seq.Size + 8
)

// step moves one pin from seq old to seq new.
type step struct {
	pin      ID
	old, new seq.Seq
}

// override places pin at seq while its point row carries nonce.
type override struct {
	pin   ID
	seq   seq.Seq
	nonce uint64
}

// orderState is a decoded order row. ovr is sorted by pin.
type orderState struct {
	version uint64
	kind    byte
	steps   []step
	ovr     []override
}

func orderKey(board ID) []byte { return edgeListPrefix(board, EdgeBoardPins, tagOrder) }

func (st orderState) encode() []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 15+len(st.steps)*stepLen+len(st.ovr)*overrideLen), st.version)
	v = append(v, st.kind)
	if st.kind == intentRespace {
		v = binary.BigEndian.AppendUint32(v, uint32(len(st.steps)))
	}
	for _, s := range st.steps {
		v = appendID(v, s.pin)
		v = s.old.AppendKey(v)
		v = s.new.AppendKey(v)
	}
	if len(st.ovr) > 0 {
		v = binary.BigEndian.AppendUint16(v, uint16(len(st.ovr)))
		for _, o := range st.ovr {
			v = appendID(v, o.pin)
			v = o.seq.AppendKey(v)
			v = binary.BigEndian.AppendUint64(v, o.nonce)
		}
	}
	return v
}

func decodeOrder(v []byte) (orderState, error) {
	if len(v) < 9 {
		return orderState{}, fmt.Errorf("order row: %d bytes", len(v))
	}
	st := orderState{version: binary.BigEndian.Uint64(v), kind: v[8]}
	rest := v[9:]
	n := 0
	switch st.kind {
	case intentNone:
	case intentMove:
		n = 1
	case intentRespace:
		if len(rest) < 4 {
			return orderState{}, fmt.Errorf("order row: truncated respace intent")
		}
		n, rest = int(binary.BigEndian.Uint32(rest)), rest[4:]
	default:
		return orderState{}, fmt.Errorf("order row: intent kind %d", st.kind)
	}
	if n < 0 || len(rest) < n*stepLen {
		return orderState{}, fmt.Errorf("order row: %d bytes of steps for %d steps", len(rest), n)
	}
	for i := range n {
		b := rest[i*stepLen:]
		st.steps = append(st.steps, step{pin: ID(binary.BigEndian.Uint64(b)), old: seq.FromKey(b[8:]), new: seq.FromKey(b[8+seq.Size:])})
	}
	rest = rest[n*stepLen:]
	if len(rest) == 0 {
		return st, nil
	}
	if len(rest) < 2 {
		return orderState{}, fmt.Errorf("order row: truncated overrides")
	}
	m := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if len(rest) != m*overrideLen {
		return orderState{}, fmt.Errorf("order row: %d bytes of overrides for %d overrides", len(rest), m)
	}
	for i := range m {
		b := rest[i*overrideLen:]
		o := override{pin: ID(binary.BigEndian.Uint64(b)), seq: seq.FromKey(b[8:]), nonce: binary.BigEndian.Uint64(b[8+seq.Size:])}
		if i > 0 && st.ovr[i-1].pin >= o.pin {
			return orderState{}, fmt.Errorf("order row: overrides out of order")
		}
		st.ovr = append(st.ovr, o)
	}
	return st, nil
}

// withOverride returns ovr (sorted by pin) with o set, in a new slice.
func withOverride(ovr []override, o override) []override {
	out := make([]override, 0, len(ovr)+1)
	i, found := slices.BinarySearchFunc(ovr, o.pin, func(x override, p ID) int { return cmp.Compare(x.pin, p) })
	out = append(out, ovr[:i]...)
	out = append(out, o)
	if found {
		i++
	}
	return append(out, ovr[i:]...)
}

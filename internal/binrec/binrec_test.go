package binrec

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var errBad = errors.New("bad row")

type fields struct {
	U8     byte
	U64    uint64
	Varint int64
	Uvar   uint64
	Str    string
}

func readAll(b []byte) (fields, Reader) {
	r := New(b, errBad)
	var f fields
	f.U8 = r.U8("u8")
	f.U64 = r.U64("u64")
	f.Varint = r.Varint("varint")
	f.Uvar = r.Uvarint("uvarint", 1000)
	f.Str = r.String("str", 10)
	return f, r
}

// TestReader reads a whole row, and rows cut or bad at each field: the fields before the
// fault come back, every one after it is zero, and the error wraps the decoder's.
func TestReader(t *testing.T) {
	row := []byte{7}
	row = binary.BigEndian.AppendUint64(row, 1<<40)
	row = binary.AppendVarint(row, -5)
	row = binary.AppendUvarint(row, 300)
	row = binary.AppendUvarint(row, 3)
	row = append(row, "abc"...)
	overLimit := append(row[:10:10], binary.AppendUvarint(nil, 1001)...)
	longStr := append(row[:12:12], binary.AppendUvarint(nil, 11)...)
	for _, tc := range []struct {
		name string
		row  []byte
		want fields
		err  string
		left int
	}{
		{"whole", append(row[:len(row):len(row)], 'x'), fields{7, 1 << 40, -5, 300, "abc"}, "", 1},
		{"empty", nil, fields{}, "bad row: short or bad u8", 0},
		{"cut in u64", row[:5], fields{U8: 7}, "bad row: short or bad u64", 0},
		{"cut in varint", row[:9], fields{U8: 7, U64: 1 << 40}, "bad row: short or bad varint", 0},
		{"uvarint over its limit", overLimit, fields{U8: 7, U64: 1 << 40, Varint: -5}, "bad row: short or bad uvarint", 0},
		{"string over its limit", longStr, fields{7, 1 << 40, -5, 300, ""}, "bad row: short or bad str length", 0},
		{"cut in string", row[:len(row)-1], fields{7, 1 << 40, -5, 300, ""}, "bad row: short or bad str", 0},
	} {
		got, r := readAll(tc.row)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: fields (-want +got):\n%s", tc.name, diff)
		}
		errText := ""
		if r.Err() != nil {
			errText = r.Err().Error()
			if !errors.Is(r.Err(), errBad) {
				t.Errorf("%s: %v does not wrap the decoder's error", tc.name, r.Err())
			}
		}
		if errText != tc.err || r.Len() != tc.left {
			t.Errorf("%s: error %q, %d bytes left; want %q, %d", tc.name, errText, r.Len(), tc.err, tc.left)
		}
	}
}

// TestFailKeepsTheFirst: a decoder's own check fails the reader once; the first error stays.
func TestFailKeepsTheFirst(t *testing.T) {
	r := New([]byte{1, 2}, errBad)
	first := errors.New("first")
	r.Fail(first)
	r.Fail(errors.New("second"))
	if r.U8("u8") != 0 || !errors.Is(r.Err(), first) || r.Len() != 0 {
		t.Errorf("after Fail: err %v, %d left; want the first error and nothing to read", r.Err(), r.Len())
	}
}

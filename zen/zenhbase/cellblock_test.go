package zenhbase

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tsuna/gohbase/hrpc"
	"github.com/tsuna/gohbase/pb"
)

// cellBlock encodes one cell the way HBase's KeyValueCodec does.
func cellBlock(row, family, qualifier, value string) []byte {
	keyLen := 2 + len(row) + 1 + len(family) + len(qualifier) + 8 + 1
	b := binary.BigEndian.AppendUint32(nil, uint32(4+4+keyLen+len(value)))
	b = binary.BigEndian.AppendUint32(b, uint32(keyLen))
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	b = binary.BigEndian.AppendUint16(b, uint16(len(row)))
	b = append(b, row...)
	b = append(b, byte(len(family)))
	b = append(b, family...)
	b = append(b, qualifier...)
	b = binary.BigEndian.AppendUint64(b, 42)
	b = append(b, byte(pb.CellType_PUT))
	return append(b, value...)
}

// decodeCells runs gohbase's cell-block decoder for a Mutate result of n cells, as a multi
// response does for each of its actions.
func decodeCells(b []byte, n uint32) ([]*pb.Cell, uint32, error) {
	resp := &pb.MutateResponse{Result: &pb.Result{AssociatedCellCount: proto32(int32(n))}}
	read, err := (&hrpc.Mutate{}).DeserializeCellBlocks(resp, b)
	return resp.GetResult().GetCell(), read, err
}

func proto32(v int32) *int32 { return &v }

func TestCellBlocksDecode(t *testing.T) {
	b := append(cellBlock("row1", "f", "q", "value"), cellBlock("r", "fam", "", "")...)
	cells, read, err := decodeCells(b, 2)
	if err != nil || int(read) != len(b) || len(cells) != 2 {
		t.Fatalf("decode = %d cells, %d of %d bytes, %v", len(cells), read, len(b), err)
	}
	type cell struct{ Row, Family, Qualifier, Value string }
	var got []cell
	for _, c := range cells {
		got = append(got, cell{string(c.Row), string(c.Family), string(c.Qualifier), string(c.Value)})
	}
	if diff := cmp.Diff([]cell{{"row1", "f", "q", "value"}, {"r", "fam", "", ""}}, got); diff != "" {
		t.Errorf("cells (-want +got):\n%s", diff)
	}
}

// TestCellBlocksGarbledIsAnError: a cell whose lengths do not add up is an error for the RPC
// (gohbase retries it), not a panic of the process. The first case is the shape of the panic
// seen in `make bench-hbase` ("slice bounds out of range [:32000] with capacity 76").
func TestCellBlocksGarbledIsAnError(t *testing.T) {
	good := cellBlock("row1", "f", "q", "value")
	rowTooLong := append([]byte{}, good...)
	binary.BigEndian.PutUint16(rowTooLong[12:14], 32000)
	familyTooLong := append([]byte{}, good...)
	familyTooLong[14+4] = 200
	tiny := binary.BigEndian.AppendUint32(nil, 3)
	tiny = append(tiny, 1, 2, 3)
	keyPastEnd := append([]byte{}, good...)
	binary.BigEndian.PutUint32(keyPastEnd[4:8], 1<<31)
	for name, b := range map[string][]byte{
		"row longer than its key":            rowTooLong,
		"family longer than its key":         familyTooLong,
		"cell shorter than its fixed fields": tiny,
		"key length past the cell":           keyPastEnd,
		"truncated":                          good[:len(good)-1],
		"second cell missing":                good,
	} {
		n := uint32(1)
		if name == "second cell missing" {
			n = 2
		}
		if _, _, err := decodeCells(b, n); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

// FuzzCellBlocks: whatever the bytes, decoding returns cells or an error, never panics, and never
// claims to have read more than it was given.
func FuzzCellBlocks(f *testing.F) {
	f.Add(cellBlock("row1", "f", "q", "value"), uint8(1))
	f.Add(append(cellBlock("a", "b", "c", "d"), cellBlock("", "", "", "")...), uint8(2))
	f.Add([]byte{0, 0, 0, 20, 0, 0, 125, 0, 0, 0, 0, 0}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		cells, read, err := decodeCells(b, uint32(n%8))
		if err != nil {
			return
		}
		if int(read) > len(b) || len(cells) != int(n%8) {
			t.Fatalf("read %d of %d bytes, %d cells of %d", read, len(b), len(cells), n%8)
		}
	})
}

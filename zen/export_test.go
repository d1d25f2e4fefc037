package zen

import "github.com/smartfeed/smartfeed/zen/seq"

// EncodeCursorForTest exposes the cursor encoder to the external tests.
func EncodeCursorForTest(from ID, t EdgeType, newestFirst bool, s seq.Seq, to ID) string {
	return encodeCursor(cursor{From: from, Type: t, NewestFirst: newestFirst, Seq: s, To: to})
}

// DecodeCursorForTest exposes the cursor decoder to the external tests.
func DecodeCursorForTest(str string) (from ID, t EdgeType, newestFirst bool, s seq.Seq, to ID, err error) {
	c, err := decodeCursor(str)
	return c.From, c.Type, c.NewestFirst, c.Seq, c.To, err
}

// SetPointScanMin sets the list size from which ListEdges scans a whole list's point rows (1: any
// list; a huge value: never) and returns a func restoring it.
func SetPointScanMin(n int) func() {
	old := pointScanMin
	pointScanMin = n
	return func() { pointScanMin = old }
}

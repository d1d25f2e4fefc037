package generator

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

// testRecord is a record of n entries of user, as a chunk of n pins writes it.
func testRecord(user zen.ID, n int, state string) *record {
	rec := &record{ID: chunkID(user, 1796636847000123), State: state, CreatedMs: 1796636847000}
	for i := range n {
		rec.Entries = append(rec.Entries, recEntry{
			Entry: zen.PoolEntry{User: user, Source: zen.Source(1 + i%3), Score: 0.731 - float64(i)/1000,
				Pin: zen.ID(0x4000000000000000 + uint64(i)*7919), Author: zen.ID(0x0040000000000123 + uint64(i)),
				Board: zen.ID(0x0080000000000456), Interest: zen.ID(i % 2), CreatedMs: 1796636000000 + int64(i), Reason: "repinned by ann"},
			Reason: "following",
		})
	}
	return rec
}

func TestRecordRoundTrip(t *testing.T) {
	user := zen.ID(0x0040000000000042)
	odd := testRecord(user, 2, stateReady)
	odd.Entries[0].Entry.Score = math.Inf(-1)
	odd.Entries[0].Entry.CreatedMs = -5
	odd.Entries[1].Reason = strings.Repeat("é", 300)
	odd.Entries[1].Entry.Reason = ""
	for name, rec := range map[string]*record{
		"intent, one entry":      testRecord(user, 1, stateIntent),
		"ready, fifty entries":   testRecord(user, 50, stateReady),
		"no entries":             testRecord(user, 0, stateIntent),
		"odd values and reasons": odd,
	} {
		t.Run(name, func(t *testing.T) {
			b, err := encodeRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeRecord(b)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(rec, got, cmp.AllowUnexported(record{}, recEntry{})); diff != "" {
				t.Errorf("decoded record (-want +got):\n%s", diff)
			}
		})
	}
}

// Records written as JSON before the binary form are still read.
func TestRecordReadsJSON(t *testing.T) {
	const stored = `{"id":"18014398509482050-7","state":"intent","created_ms":1796636847000,"entries":[` +
		`{"entry":{"User":18014398509482050,"Source":2,"Score":0.5,"Pin":4611686018427387911,"Author":18014398509482051,` +
		`"Board":36028797018964070,"Interest":0,"CreatedMs":1796636000000,"Reason":"r"},"reason":"following"}]}`
	got, err := decodeRecord([]byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	want := &record{ID: "18014398509482050-7", State: stateIntent, CreatedMs: 1796636847000, Entries: []recEntry{{
		Entry: zen.PoolEntry{User: 18014398509482050, Source: 2, Score: 0.5, Pin: 4611686018427387911, Author: 18014398509482051,
			Board: 36028797018964070, CreatedMs: 1796636000000, Reason: "r"},
		Reason: "following"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON record (-want +got):\n%s", diff)
	}
}

// A chunk's record is written twice on the page's path: the binary form is less than half the
// JSON's size for a full chunk.
func TestRecordSize(t *testing.T) {
	rec := testRecord(zen.ID(0x0040000000000042), 50, stateReady)
	b, err := encodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if 2*len(b) >= len(j) {
		t.Errorf("a 50-entry record takes %d bytes, JSON %d: want less than half", len(b), len(j))
	}
}

func TestDecodeRecordRefuses(t *testing.T) {
	good, err := encodeRecord(testRecord(zen.ID(0x0040000000000042), 3, stateIntent))
	if err != nil {
		t.Fatal(err)
	}
	badState := append([]byte(nil), good...)
	badState[1] = 9
	hugeCount := []byte{recordFormat, 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}
	for name, b := range map[string][]byte{
		"empty":             nil,
		"unknown format":    append([]byte{7}, good[1:]...),
		"unknown state":     badState,
		"truncated":         good[:len(good)-1],
		"cut in an entry":   good[:len(good)/2],
		"a byte left over":  append(append([]byte(nil), good...), 0),
		"more entries than": hugeCount,
		"bad JSON":          []byte(`{"id":`),
	} {
		if rec, err := decodeRecord(b); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, rec)
		} else if name != "bad JSON" && !errors.Is(err, errBadRecord) {
			t.Errorf("%s: %v, want errBadRecord", name, err)
		}
	}
	if _, err := encodeRecord(&record{ID: "1-1", State: "settled"}); !errors.Is(err, errBadRecord) {
		t.Errorf("encoding an unknown state: %v, want errBadRecord", err)
	}
}

// FuzzDecodeRecord: any stored bytes decode to a record or an error, never a panic, and a
// record decoded from the binary form encodes to bytes that decode to the same record.
func FuzzDecodeRecord(f *testing.F) {
	for _, n := range []int{0, 1, 3} {
		b, err := encodeRecord(testRecord(zen.ID(0x0040000000000042), n, stateReady))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"id":"1-1","state":"ready","entries":[{"entry":{"User":1},"reason":"x"}]}`))
	f.Add([]byte{recordFormat, 2, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord(b)
		if err != nil || len(b) == 0 || b[0] == '{' {
			return
		}
		again, err := encodeRecord(rec)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		back, err := decodeRecord(again)
		if err != nil {
			t.Fatalf("a record's encoding does not decode: %v", err)
		}
		if diff := cmp.Diff(rec, back, cmp.Comparer(sameFloat)); diff != "" {
			t.Fatalf("record changed by a round trip (-decoded +again):\n%s", diff)
		}
	})
}

// sameFloat compares scores by their bits, so a NaN read from a record equals itself.
func sameFloat(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// BenchmarkRecordCodec encodes and decodes a full chunk's record, binary against JSON.
func BenchmarkRecordCodec(b *testing.B) {
	rec := testRecord(zen.ID(0x0040000000000042), 50, stateReady)
	for _, c := range []struct {
		name string
		enc  func(*record) ([]byte, error)
		dec  func([]byte) (*record, error)
	}{
		{"binary", encodeRecord, decodeRecord},
		{"json", func(r *record) ([]byte, error) { return json.Marshal(r) }, func(v []byte) (*record, error) {
			var r record
			return &r, json.Unmarshal(v, &r)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				v, err := c.enc(rec)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.dec(v); err != nil {
					b.Fatal(err)
				}
				size = len(v)
			}
			b.ReportMetric(float64(size), "bytes/record")
		})
	}
}

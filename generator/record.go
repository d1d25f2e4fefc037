package generator

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/smartfeed/smartfeed/zen"
)

// A chunk record is written twice on the path of every page that gets a chunk (its intent,
// then ready) and read again when the chunk settles, so it is stored in a compact binary form:
//
//	0x01                       format
//	state(1)                   1 intent, 2 ready
//	created ms                 varint
//	len(id) | id               uvarint length, bytes
//	n                          uvarint: entries
//	n × entry:
//	  user(8) source(1) score(8, IEEE 754 bits) pin(8) author(8) board(8) interest(8)
//	  created ms (varint)  len | pool reason  len | chosen reason
//
// (integers big-endian). Records stored as JSON (a leading '{') are read too.
const recordFormat = 0x01

// recordStates numbers the record states in the binary form (0 is no state).
var recordStates = [...]string{1: stateIntent, 2: stateReady}

// recEntryMin is the fewest bytes an entry takes: its fixed fields and two empty reasons.
const recEntryMin = 8 + 1 + 8 + 8 + 8 + 8 + 8 + 1 + 1 + 1

// errBadRecord marks a record that does not decode.
var errBadRecord = errors.New("bad chunk record")

// encodeRecord returns rec's stored form.
func encodeRecord(rec *record) ([]byte, error) {
	state := 0
	for i, s := range recordStates {
		if s != "" && s == rec.State {
			state = i
		}
	}
	if state == 0 {
		return nil, fmt.Errorf("%w: state %q", errBadRecord, rec.State)
	}
	size := 3 + binary.MaxVarintLen64 + 2*binary.MaxVarintLen64 + len(rec.ID)
	for _, e := range rec.Entries {
		size += recEntryMin + 2*binary.MaxVarintLen64 + len(e.Entry.Reason) + len(e.Reason)
	}
	b := make([]byte, 0, size)
	b = append(b, recordFormat, byte(state))
	b = binary.AppendVarint(b, rec.CreatedMs)
	b = appendString(b, rec.ID)
	b = binary.AppendUvarint(b, uint64(len(rec.Entries)))
	for _, re := range rec.Entries {
		e := re.Entry
		b = binary.BigEndian.AppendUint64(b, uint64(e.User))
		b = append(b, byte(e.Source))
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.Score))
		for _, id := range [...]zen.ID{e.Pin, e.Author, e.Board, e.Interest} {
			b = binary.BigEndian.AppendUint64(b, uint64(id))
		}
		b = binary.AppendVarint(b, e.CreatedMs)
		b = appendString(b, e.Reason)
		b = appendString(b, re.Reason)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeRecord reads a stored record, in the binary form or as JSON. Every byte of the binary
// form must be accounted for: a record with bytes left over, a length past its end or an
// unknown state is refused.
func decodeRecord(b []byte) (*record, error) {
	if len(b) > 0 && b[0] == '{' {
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("decode chunk record: %w", err)
		}
		return &rec, nil
	}
	d := recDecoder{b: b}
	if d.byte() != recordFormat {
		return nil, fmt.Errorf("%w: format %#x", errBadRecord, b[:min(len(b), 1)])
	}
	rec := &record{}
	if st := int(d.byte()); st < len(recordStates) && recordStates[st] != "" {
		rec.State = recordStates[st]
	} else if d.err == nil {
		return nil, fmt.Errorf("%w: state %d", errBadRecord, st)
	}
	rec.CreatedMs = d.varint()
	rec.ID = d.string()
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)/recEntryMin) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", errBadRecord, n, len(d.b))
	}
	if n > 0 && d.err == nil {
		rec.Entries = make([]recEntry, n)
	}
	for i := range rec.Entries {
		e := &rec.Entries[i].Entry
		e.User = zen.ID(d.u64())
		e.Source = zen.Source(d.byte())
		e.Score = math.Float64frombits(d.u64())
		e.Pin, e.Author, e.Board, e.Interest = zen.ID(d.u64()), zen.ID(d.u64()), zen.ID(d.u64()), zen.ID(d.u64())
		e.CreatedMs = d.varint()
		e.Reason = d.string()
		rec.Entries[i].Reason = d.string()
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%w: %d bytes after the last entry", errBadRecord, len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("decode chunk record: %w", d.err)
	}
	return rec, nil
}

// recDecoder reads the binary record form; the first short or bad field sets err, after which
// every read returns zero.
type recDecoder struct {
	b   []byte
	err error
}

func (d *recDecoder) short(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: short or bad %s", errBadRecord, what)
	}
	d.b = nil
}

func (d *recDecoder) byte() byte {
	if len(d.b) < 1 {
		d.short("byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *recDecoder) u64() uint64 {
	if len(d.b) < 8 {
		d.short("integer")
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *recDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.short("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.short("length")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recDecoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.short("string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

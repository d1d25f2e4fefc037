package generator

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/smartfeed/smartfeed/internal/binrec"
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
	d := binrec.New(b, errBadRecord)
	if d.U8("format") != recordFormat {
		return nil, fmt.Errorf("%w: format %#x", errBadRecord, b[:min(len(b), 1)])
	}
	rec := &record{}
	if st := int(d.U8("state")); st < len(recordStates) && recordStates[st] != "" {
		rec.State = recordStates[st]
	} else if d.Err() == nil {
		return nil, fmt.Errorf("%w: state %d", errBadRecord, st)
	}
	rec.CreatedMs = d.Varint("created time")
	rec.ID = d.String("id", math.MaxUint32)
	n := d.Uvarint("entry count", math.MaxUint32)
	if d.Err() == nil && n > uint64(d.Len()/recEntryMin) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", errBadRecord, n, d.Len())
	}
	if n > 0 && d.Err() == nil {
		rec.Entries = make([]recEntry, n)
	}
	for i := range rec.Entries {
		e := &rec.Entries[i].Entry
		e.User = zen.ID(d.U64("user"))
		e.Source = zen.Source(d.U8("source"))
		e.Score = math.Float64frombits(d.U64("score"))
		e.Pin, e.Author, e.Board, e.Interest = zen.ID(d.U64("pin")), zen.ID(d.U64("author")), zen.ID(d.U64("board")), zen.ID(d.U64("interest"))
		e.CreatedMs = d.Varint("pin time")
		e.Reason = d.String("reason", math.MaxUint32)
		rec.Entries[i].Reason = d.String("entry reason", math.MaxUint32)
	}
	if d.Err() == nil && d.Len() > 0 {
		d.Fail(fmt.Errorf("%w: %d bytes after the last entry", errBadRecord, d.Len()))
	}
	if d.Err() != nil {
		return nil, fmt.Errorf("decode chunk record: %w", d.Err())
	}
	return rec, nil
}

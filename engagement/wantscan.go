package engagement

import (
	"slices"
	"strconv"
)

// The in-place scan of a profile row for ProfilesWanted. It reads the JSON this package writes
// (json.Marshal of a Profile: the fields "aff", of entries with "k", "id", "v" and "t", and
// "hidden_authors", in any order and with any JSON whitespace), and gives up (ok false) on
// anything else: another field or key spelling, an escaped key, a null, a field twice, a
// number the full decoder would refuse. The caller then decodes the row with encoding/json, so
// a row reads the same either way. Numbers are converted by strconv exactly as encoding/json
// converts them.

// profileScan is a cursor over one row.
type profileScan struct {
	b []byte
	i int
}

// peek skips whitespace and returns the next byte (0 at the end).
func (s *profileScan) peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// eat consumes c if it is the next byte after whitespace.
func (s *profileScan) eat(c byte) bool {
	if s.peek() == c && c != 0 {
		s.i++
		return true
	}
	return false
}

// key reads `"name":` and returns name (no escapes).
func (s *profileScan) key() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) && s.b[s.i] != '"' {
		if s.b[s.i] == '\\' || s.b[s.i] < 0x20 {
			return nil, false
		}
		s.i++
	}
	if s.i >= len(s.b) {
		return nil, false
	}
	k := s.b[start:s.i]
	s.i++
	return k, s.eat(':')
}

// number reads a JSON number (RFC 8259 grammar) and reports whether it is an integer (no
// fraction or exponent) and whether it has an exponent.
func (s *profileScan) number() (tok []byte, integer, exp, ok bool) {
	s.peek()
	start, b := s.i, s.b
	i := s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return nil, false, false, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		i, integer = i+1, false
		if i >= len(b) || !isDigit(b[i]) {
			return nil, false, false, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i, integer, exp = i+1, false, true
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return nil, false, false, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return b[start:i], integer, exp, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// uint reads an unsigned integer of bits bits, as encoding/json reads one into such a field.
func (s *profileScan) uint(bits int) (uint64, bool) {
	tok, integer, _, ok := s.number()
	if !ok || !integer {
		return 0, false
	}
	if len(tok) > 19 || tok[0] == '-' {
		v, err := strconv.ParseUint(string(tok), 10, bits)
		return v, err == nil
	}
	// At most 19 digits without sign: below 10^19, no uint64 overflow.
	var v uint64
	for _, c := range tok {
		v = v*10 + uint64(c-'0')
	}
	return v, bits == 64 || v < 1<<bits
}

// array calls elem for each element of a JSON array (the cursor at its '[').
func (s *profileScan) array(elem func() bool) bool {
	if !s.eat('[') {
		return false
	}
	if s.eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.eat(']') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// object calls field for each key of a JSON object (the cursor at its '{'), with the cursor
// at the key's value; a key seen twice fails.
func (s *profileScan) object(field func(k []byte) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	for {
		k, ok := s.key()
		if !ok || !field(k) {
			return false
		}
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// entry reads one affinity entry, converting v and t only when (k, id) is wanted or their
// text could be refused by the full decoder (a float outside its range, an int64 overflow).
func (s *profileScan) entry(want *Want) (e AffinityEntry, keep, ok bool) {
	var vTok, tTok []byte
	var vExp bool
	if e, vTok, tTok, vExp, ok = s.marshalled(); !ok {
		e, vTok, tTok, vExp, ok = s.anyEntry()
	}
	if !ok {
		return e, false, false
	}
	keep = want.keeps(e.Kind, e.ID)
	// Without an exponent and at most 300 characters, a number is a finite float64 (no
	// conversion error to find); t of at most 18 digits fits an int64.
	if vTok != nil && (keep || vExp || len(vTok) > 300) {
		v, err := strconv.ParseFloat(string(vTok), 64)
		if err != nil {
			return e, false, false
		}
		e.V = v
	}
	if tTok != nil && (keep || len(tTok) > 18) {
		t, err := strconv.ParseInt(string(tTok), 10, 64)
		if err != nil {
			return e, false, false
		}
		e.T = t
	}
	return e, keep, true
}

// lit consumes l if the row continues with it.
func (s *profileScan) lit(l string) bool {
	if len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		return false
	}
	s.i += len(l)
	return true
}

// marshalled reads an entry laid out as json.Marshal writes it, {"k":…,"id":…,"v":…,"t":…};
// on any other layout it leaves the cursor where it was and ok false.
func (s *profileScan) marshalled() (e AffinityEntry, vTok, tTok []byte, vExp, ok bool) {
	start := s.i
	var k uint64
	var tInt bool
	ok = s.lit(`{"k":`)
	if ok {
		k, ok = s.uint(8)
	}
	ok = ok && s.lit(`,"id":`)
	if ok {
		e.ID, ok = s.uint(64)
	}
	ok = ok && s.lit(`,"v":`)
	if ok {
		vTok, _, vExp, ok = s.number()
	}
	ok = ok && s.lit(`,"t":`)
	if ok {
		tTok, tInt, _, ok = s.number()
	}
	if !ok || !tInt || !s.lit("}") {
		s.i = start
		return AffinityEntry{}, nil, nil, false, false
	}
	e.Kind = Kind(k)
	return e, vTok, tTok, vExp, true
}

// anyEntry reads an entry object with its fields in any order, each at most once, any of
// them absent; only k and id are converted.
func (s *profileScan) anyEntry() (e AffinityEntry, vTok, tTok []byte, vExp, ok bool) {
	var seen [4]bool
	ok = s.object(func(k []byte) bool {
		var f int
		switch string(k) {
		case "k":
			f = 0
		case "id":
			f = 1
		case "v":
			f = 2
		case "t":
			f = 3
		default:
			return false
		}
		if seen[f] {
			return false
		}
		seen[f] = true
		var good bool
		switch f {
		case 0:
			var v uint64
			v, good = s.uint(8)
			e.Kind = Kind(v)
		case 1:
			e.ID, good = s.uint(64)
		case 2:
			vTok, _, vExp, good = s.number()
		case 3:
			var integer bool
			tTok, integer, _, good = s.number()
			good = good && integer
		}
		return good
	})
	return e, vTok, tTok, vExp, ok
}

// scanWanted scans row b for the entries want names, appending them to aff and hid; ok is
// false when the row is not in the shape this package writes (the caller then decodes it in
// full; aff and hid may hold entries appended before the scan gave up).
func scanWanted(b []byte, want *Want, aff []AffinityEntry, hid []uint64) ([]AffinityEntry, []uint64, bool) {
	s := profileScan{b: b}
	var seenAff, seenHid bool
	ok := s.object(func(k []byte) bool {
		switch string(k) {
		case "aff":
			if seenAff {
				return false
			}
			seenAff = true
			return s.array(func() bool {
				e, keep, ok := s.entry(want)
				if keep {
					aff = append(aff, e)
				}
				return ok
			})
		case "hidden_authors":
			if seenHid {
				return false
			}
			seenHid = true
			return s.array(func() bool {
				a, ok := s.uint(64)
				if ok && slices.Contains(want.Authors, a) {
					hid = append(hid, a)
				}
				return ok
			})
		}
		return false
	})
	s.peek()
	if !ok || s.i != len(s.b) {
		return aff, hid, false
	}
	return aff, hid, true
}

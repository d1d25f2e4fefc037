package engagement

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/smartfeed/smartfeed/zen"
)

// Key names one affinity: its kind and ID.
type Key struct {
	Kind Kind
	ID   uint64
}

// Want names the part of a profile a reader scores with: the affinities of Keys, every
// affinity of a kind in Kinds, and whether the user hid a pin of one of Authors. A fanout
// scores one pin for a page of receivers and needs only these few entries of each profile.
type Want struct {
	Keys    []Key
	Kinds   []Kind
	Authors []uint64
}

// keeps reports whether the affinity (kind, id) is wanted.
func (w *Want) keeps(kind Kind, id uint64) bool {
	if slices.Contains(w.Kinds, kind) {
		return true
	}
	for _, k := range w.Keys {
		if k.Kind == kind && k.ID == id {
			return true
		}
	}
	return false
}

// filter keeps, in order, the affinities and hidden authors of p that w wants, appending them
// to aff and hid.
func (w *Want) filter(p Profile, aff []AffinityEntry, hid []uint64) ([]AffinityEntry, []uint64) {
	for _, e := range p.Affinities {
		if w.keeps(e.Kind, e.ID) {
			aff = append(aff, e)
		}
	}
	for _, a := range p.HiddenAuthors {
		if slices.Contains(w.Authors, a) {
			hid = append(hid, a)
		}
	}
	return aff, hid
}

// ProfilesWanted returns the profiles of users, in one batched read, each holding only the
// affinities and hidden authors want names, in the order of the full profile: for what want
// names, Affinity and HidesAuthor answer exactly as on the profile Profiles returns. The rows
// are scanned in place for the wanted entries (the others' numbers are not converted, and
// nothing is allocated per entry or per user); a row in any other shape than the one this
// package writes is decoded in full and filtered, with the same errors as Profiles. The
// returned profiles share two backing arrays: they must not be appended to.
func (s *Store) ProfilesWanted(ctx context.Context, users []zen.ID, want Want) ([]Profile, error) {
	buf := make([]byte, 0, 9*len(users))
	keys := make([][]byte, len(users))
	for i, u := range users {
		buf = binary.BigEndian.AppendUint64(buf, uint64(u))
		buf = append(buf, rowProfile)
		keys[i] = buf[len(buf)-9 : len(buf) : len(buf)]
	}
	vals, err := zen.GetMany(ctx, s.t, keys)
	if err != nil {
		return nil, fmt.Errorf("read profiles: %w", err)
	}
	out := make([]Profile, len(users))
	// Offsets into aff and hid of each user's entries; the profiles take their slices once
	// both arrays have stopped growing.
	type span struct{ a0, a1, h0, h1 int }
	var spans []span
	var at []int
	var aff []AffinityEntry
	var hid []uint64
	for i, v := range vals {
		if v == nil {
			continue
		}
		sp := span{a0: len(aff), h0: len(hid)}
		var ok bool
		if aff, hid, ok = scanWanted(v, &want, aff, hid); !ok {
			aff, hid = aff[:sp.a0], hid[:sp.h0]
			var p Profile
			if err := json.Unmarshal(v, &p); err != nil {
				return nil, fmt.Errorf("profile of %d: %w", users[i], err)
			}
			aff, hid = want.filter(p, aff, hid)
		}
		sp.a1, sp.h1 = len(aff), len(hid)
		spans, at = append(spans, sp), append(at, i)
	}
	for j, i := range at {
		sp := spans[j]
		if sp.a1 > sp.a0 {
			out[i].Affinities = aff[sp.a0:sp.a1:sp.a1]
		}
		if sp.h1 > sp.h0 {
			out[i].HiddenAuthors = hid[sp.h0:sp.h1:sp.h1]
		}
	}
	return out, nil
}

package engagement

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// testWant is what a fanout of a pin by author 3 on board 5 with interests 7 and 8 reads.
var testWant = Want{
	Keys:    []Key{{KindAuthor, 3}, {KindBoard, 5}, {KindInterest, 7}, {KindInterest, 8}},
	Kinds:   []Kind{KindSource},
	Authors: []uint64{3},
}

// randomProfile is a profile whose IDs are drawn from a small range, so that testWant names
// some of its entries, with values of every magnitude json.Marshal writes differently.
func randomProfile(r *rand.Rand) Profile {
	var p Profile
	kinds := []Kind{KindAuthor, KindBoard, KindInterest, KindSource}
	for range r.IntN(40) {
		v := r.NormFloat64() * math.Pow(10, float64(r.IntN(30)-15))
		p.Affinities = append(p.Affinities, AffinityEntry{Kind: kinds[r.IntN(len(kinds))], ID: uint64(r.IntN(12)),
			V: v, T: r.Int64N(2e12) - 1e11})
	}
	for range r.IntN(6) {
		p.HiddenAuthors = append(p.HiddenAuthors, uint64(r.IntN(8)))
	}
	return p
}

// TestProfilesWantedMatchesProfiles: for rows written by the package, reformatted, or in a
// shape only encoding/json reads, ProfilesWanted returns exactly the entries of the full
// profile that the Want names, so every affinity and hidden author a fanout scores with is the
// same bit for bit; and the package's own rows are read by the scan, not by the fallback.
func TestProfilesWantedMatchesProfiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	type row struct {
		name string
		v    string
		scan bool // read by the in-place scan
	}
	var rows []row
	for i := range 60 {
		b, err := json.Marshal(randomProfile(r))
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row{fmt.Sprintf("marshal%d", i), string(b), true})
		ind, err := json.MarshalIndent(randomProfile(r), " ", "\t")
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row{fmt.Sprintf("indent%d", i), "\r\n" + string(ind) + "\n", true})
	}
	rows = append(rows,
		row{"empty object", `{}`, true},
		row{"empty lists", `{"aff":[],"hidden_authors":[]}`, true},
		row{"reordered", `{"hidden_authors":[3,4],"aff":[{"t":5,"v":-2.5e-3,"id":3,"k":97},{"id":7,"k":105,"v":1,"t":-9}]}`, true},
		row{"missing fields", `{"aff":[{"k":97,"id":3},{"id":5,"v":2},{}]}`, true},
		row{"big t", `{"aff":[{"k":98,"id":5,"v":1E2,"t":9223372036854775807}]}`, true},
		row{"unknown field", `{"aff":[{"k":97,"id":3,"v":1,"t":2}],"extra":{"x":[1,2]}}`, false},
		row{"other case", `{"AFF":[{"K":97,"ID":3,"v":1,"t":2}],"Hidden_Authors":[3]}`, false},
		row{"null list", `{"aff":null,"hidden_authors":[3]}`, false},
		row{"null value", `{"aff":[{"k":97,"id":3,"v":null,"t":2}]}`, false},
		row{"escaped key", `{"a\u0066f":[{"k":97,"id":3,"v":1,"t":2}]}`, false},
		row{"field twice", `{"aff":[{"k":97,"id":3,"v":1,"t":2}],"aff":[{"k":97,"id":3,"v":4,"t":2}]}`, false},
		row{"entry field twice", `{"aff":[{"k":97,"id":3,"v":1,"v":4,"t":2}]}`, false},
		row{"null row", `null`, false},
	)
	s := newStore(t, nil)
	users := make([]zen.ID, len(rows)+1) // the last one has no row
	var muts []zen.Mutation
	for i, rw := range rows {
		users[i] = mustID(uint16(i%7), zen.TypeUser, uint64(i+1))
		muts = append(muts, zen.Mutation{Key: key(users[i], rowProfile, nil), Value: []byte(rw.v)})
	}
	users[len(rows)] = mustID(1, zen.TypeUser, 999)
	if err := s.t.Apply(t.Context(), muts); err != nil {
		t.Fatal(err)
	}
	full, err := s.Profiles(t.Context(), users)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ProfilesWanted(t.Context(), users, testWant)
	if err != nil {
		t.Fatal(err)
	}
	for i, u := range users {
		name := "no row"
		if i < len(rows) {
			name = rows[i].name
			_, _, scanned := scanWanted([]byte(rows[i].v), &testWant, nil, nil)
			if scanned != rows[i].scan {
				t.Errorf("%s: scanned %v, want %v", name, scanned, rows[i].scan)
			}
		}
		aff, hid := testWant.filter(full[i], nil, nil)
		if diff := cmp.Diff(Profile{Affinities: aff, HiddenAuthors: hid}, got[i]); diff != "" {
			t.Errorf("%s (user %d): wanted entries differ from the full profile's (-full +wanted):\n%s", name, u, diff)
		}
		for _, k := range testWant.Keys {
			f, g := full[i].Affinity(k.Kind, k.ID, 2e12, DefaultHalfLife), got[i].Affinity(k.Kind, k.ID, 2e12, DefaultHalfLife)
			if math.Float64bits(f) != math.Float64bits(g) {
				t.Errorf("%s: affinity %c/%d %v, full profile's %v", name, k.Kind, k.ID, g, f)
			}
		}
		if full[i].HidesAuthor(3) != got[i].HidesAuthor(3) {
			t.Errorf("%s: hides author 3 %v, full profile %v", name, got[i].HidesAuthor(3), full[i].HidesAuthor(3))
		}
	}
}

// TestProfilesWantedRefusesWhatProfilesRefuses: a row encoding/json refuses fails the read,
// with the same error, even where the refused number is in an entry the Want does not name.
func TestProfilesWantedRefusesWhatProfilesRefuses(t *testing.T) {
	for _, v := range []string{
		``,
		`{"aff":[{"k":300,"id":1,"v":1,"t":1}]}`,
		`{"aff":[{"k":1,"id":-1,"v":1,"t":1}]}`,
		`{"aff":[{"k":1,"id":1,"v":1e999,"t":1}]}`,
		`{"aff":[{"k":1,"id":1,"v":1,"t":1.5}]}`,
		`{"aff":[{"k":1,"id":1,"v":1,"t":99999999999999999999}]}`,
		`{"aff":[{"k":1,"id":1,"v":01,"t":1}]}`,
		`{"aff":[{"k":1,"id":1,"v":1,"t":1}]} x`,
		`{"hidden_authors":[1.5]}`,
		`{"aff":[{"k":97,"id":3,"v":1,"t":2}]`,
	} {
		s := newStore(t, nil)
		if err := s.t.Apply(t.Context(), []zen.Mutation{{Key: key(alice, rowProfile, nil), Value: []byte(v)}}); err != nil {
			t.Fatal(err)
		}
		_, ferr := s.Profiles(t.Context(), []zen.ID{alice})
		_, werr := s.ProfilesWanted(t.Context(), []zen.ID{alice}, testWant)
		if ferr == nil || werr == nil || ferr.Error() != werr.Error() {
			t.Errorf("row %q: ProfilesWanted's error %v, Profiles' %v: want the same error", v, werr, ferr)
		}
	}
}

// BenchmarkProfilesWanted reads 1,000 profiles of 128 affinities each, in full (Profiles) and
// only what one pin's scores need (ProfilesWanted).
func BenchmarkProfilesWanted(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	tab, err := zenmem.New().Table(b.Context(), Table)
	if err != nil {
		b.Fatal(err)
	}
	s := NewStore(tab, 0, nil)
	users := make([]zen.ID, 1000)
	var muts []zen.Mutation
	for i := range users {
		users[i] = mustID(uint16(i%4096), zen.TypeUser, uint64(i+1))
		var p Profile
		for j := range 128 {
			p.Affinities = append(p.Affinities, AffinityEntry{Kind: KindInterest, ID: uint64(j), V: r.Float64() * 5, T: 1_767_000_000_000 + int64(j)})
		}
		v, _ := json.Marshal(p)
		muts = append(muts, zen.Mutation{Key: key(users[i], rowProfile, nil), Value: v})
	}
	if err := s.t.Apply(b.Context(), muts); err != nil {
		b.Fatal(err)
	}
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Profiles(b.Context(), users); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wanted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.ProfilesWanted(b.Context(), users, testWant); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzScanWanted: whatever the row, the in-place scan either gives up (and the full decode is
// used) or finds exactly the wanted entries of the full decode; it never accepts a row the
// full decode refuses.
func FuzzScanWanted(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 4 {
		b, _ := json.Marshal(randomProfile(r))
		f.Add(b)
	}
	f.Add([]byte(`{"hidden_authors":[3,4],"aff":[{"t":5,"v":-2.5e-3,"id":3,"k":97}]}`))
	f.Add([]byte(`{"aff":[{"k":97,"id":3,"v":1e999,"t":2}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		aff, hid, ok := scanWanted(b, &testWant, nil, nil)
		var p Profile
		err := json.Unmarshal(b, &p)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("scan accepted %q, which encoding/json refuses: %v", b, err)
		}
		waff, whid := testWant.filter(p, nil, nil)
		if diff := cmp.Diff(Profile{Affinities: waff, HiddenAuthors: whid}, Profile{Affinities: aff, HiddenAuthors: hid}); diff != "" {
			t.Fatalf("row %q: scan differs from the full decode (-full +scan):\n%s", b, diff)
		}
	})
}

package zen_test

import (
	"bytes"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

func not8(b [8]byte) [8]byte {
	for i := range b {
		b[i] = ^b[i]
	}
	return b
}

// TestScoreVectors checks docs/data-model.md §2.3 (float64 asc / desc).
func TestScoreVectors(t *testing.T) {
	for _, tc := range []struct {
		f         float64
		asc, desc string
	}{
		{math.Inf(-1), "000fffffffffffff", "fff0000000000000"},
		{-1.0, "400fffffffffffff", "bff0000000000000"},
		{0, "8000000000000000", "7fffffffffffffff"},
		{math.Copysign(0, -1), "8000000000000000", "7fffffffffffffff"}, // −0 canonicalised to +0
		{5e-324, "8000000000000001", "7ffffffffffffffe"},
		{0.5, "bfe0000000000000", "401fffffffffffff"},
		{1.0, "bff0000000000000", "400fffffffffffff"},
		{2.0, "c000000000000000", "3fffffffffffffff"},
		{math.Inf(1), "fff0000000000000", "000fffffffffffff"},
	} {
		b, err := zen.EncodeScore(tc.f)
		if err != nil {
			t.Fatalf("EncodeScore(%v): %v", tc.f, err)
		}
		d := not8(b)
		got := [2]string{hex.EncodeToString(b[:]), hex.EncodeToString(d[:])}
		if diff := cmp.Diff([2]string{tc.asc, tc.desc}, got); diff != "" {
			t.Errorf("EncodeScore(%v) asc/desc (-want +got):\n%s", tc.f, diff)
		}
		f, err := zen.DecodeScore(b[:])
		if err != nil || f != tc.f || (f == 0 && math.Signbit(f)) {
			t.Errorf("DecodeScore(%x) = %v, %v; want %v (+0 for -0)", b, f, err, tc.f)
		}
	}
}

func TestScoreRejects(t *testing.T) {
	if _, err := zen.EncodeScore(math.NaN()); err == nil {
		t.Error("EncodeScore(NaN): no error")
	}
	for _, in := range []string{
		"", "00", "8000000000000000ff",
		"7fffffffffffffff", // −0: not canonical
		"fff8000000000000", // NaN
		"0007ffffffffffff", // −NaN
	} {
		b, _ := hex.DecodeString(in)
		if f, err := zen.DecodeScore(b); err == nil {
			t.Errorf("DecodeScore(%s) = %v, want error", in, f)
		}
	}
}

// TestScoreOrder checks that byte order of encodings equals numeric order on random floats.
func TestScoreOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	fs := []float64{math.Inf(-1), math.Inf(1), 0, -math.SmallestNonzeroFloat64, math.SmallestNonzeroFloat64, -math.MaxFloat64, math.MaxFloat64}
	for range 2000 {
		f := math.Float64frombits(r.Uint64())
		if !math.IsNaN(f) {
			fs = append(fs, f)
		}
		fs = append(fs, r.NormFloat64())
	}
	encs := make([][]byte, len(fs))
	for i, f := range fs {
		b, err := zen.EncodeScore(f)
		if err != nil {
			t.Fatal(err)
		}
		encs[i] = b[:]
	}
	sort.Float64s(fs)
	sort.Slice(encs, func(i, j int) bool { return bytes.Compare(encs[i], encs[j]) < 0 })
	for i, e := range encs {
		f, err := zen.DecodeScore(e)
		if err != nil {
			t.Fatal(err)
		}
		if f != fs[i] {
			t.Fatalf("position %d: byte order gives %v, numeric order %v", i, f, fs[i])
		}
	}
}

// TestPoolKeyVectors checks docs/data-model.md §2.3's pool keys: user | ^score | pin, with our source
// byte after the user, and their scan order (best first, ties to the smaller pin).
func TestPoolKeyVectors(t *testing.T) {
	user, _ := zen.ParseID("241294629943640797")
	rows := []struct {
		score    float64
		pin      string
		userHex  string
		scoreHex string
		pinHex   string
	}{
		{1.0, "241294492511700000", "03594030000002dd", "400fffffffffffff", "03594010006b0420"},
		{0.93, "241294492511762324", "03594030000002dd", "40123d70a3d70a3c", "03594010006bf794"},
		{0.93, "241294492511762325", "03594030000002dd", "40123d70a3d70a3c", "03594010006bf795"},
		{0.5, "241294492511762326", "03594030000002dd", "401fffffffffffff", "03594010006bf796"},
		{-0.1, "241294492511762399", "03594030000002dd", "bfb999999999999a", "03594010006bf7df"},
	}
	var keys [][]byte
	for _, r := range rows {
		pin, err := zen.ParseID(r.pin)
		if err != nil {
			t.Fatal(err)
		}
		k, err := zen.PoolKey(user, zen.SourceFollowing, r.score, pin)
		if err != nil {
			t.Fatal(err)
		}
		want := r.userHex + "01" + r.scoreHex + r.pinHex
		if got := hex.EncodeToString(k); got != want {
			t.Errorf("PoolKey(%v, %s) = %s, want %s", r.score, r.pin, got, want)
		}
		u, src, score, p, err := zen.ParsePoolKey(k)
		if err != nil || u != user || src != zen.SourceFollowing || score != r.score || p != pin {
			t.Errorf("ParsePoolKey(%x) = %d %d %v %d %v", k, u, src, score, p, err)
		}
		keys = append(keys, k)
	}
	shuffled := append([][]byte(nil), keys...)
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	sort.Slice(shuffled, func(i, j int) bool { return bytes.Compare(shuffled[i], shuffled[j]) < 0 })
	if diff := cmp.Diff(keys, shuffled); diff != "" {
		t.Errorf("scan order (-want +got):\n%s", diff)
	}
}

func TestParsePoolKeyRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"03594030000002dd01400fffffffffffff03594010006b04",   // short
		"03594030000002dd00400fffffffffffff03594010006b0420", // source 0 (index row space)
		"03594030000002dd01800000000000000003594010006b0420", // ^score = −0
		"03594030000002dd010007ffffffffffff03594010006b0420", // ^score = NaN
		"00000000000000dd01400fffffffffffff03594010006b0420", // user type 0
		"c3594030000002dd01400fffffffffffff03594010006b0420", // user reserved bits
	} {
		b, _ := hex.DecodeString(in)
		if _, _, _, _, err := zen.ParsePoolKey(b); err == nil {
			t.Errorf("ParsePoolKey(%s): no error", in)
		}
	}
}

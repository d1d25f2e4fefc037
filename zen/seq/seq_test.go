package seq

import (
	"encoding/hex"
	"errors"
	"testing"
)

func TestVectors(t *testing.T) {
	a := FromMillis(1700000000000)
	if got, want := a.String(), "17000000000000000000000000000000000000"; got != want {
		t.Fatalf("FromMillis = %s, want %s", got, want)
	}
	k := a.Key()
	if got, want := hex.EncodeToString(k[:]), "0cca14b638597870e805901000000000"; got != want {
		t.Fatalf("key = %s, want %s", got, want)
	}
	b := FromMillis(1700000000001)
	m, err := Between(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.String(), "17000000000005000000000000000000000000"; got != want {
		t.Fatalf("Between = %s, want %s", got, want)
	}
	k = m.Key()
	if got, want := hex.EncodeToString(k[:]), "0cca14b6385d9b3b730f90b425000000"; got != want {
		t.Fatalf("mid key = %s, want %s", got, want)
	}
	if Unit.String() != "10000000000000000000000000" || Max.String() != "99999999999999999999999999999999999999" {
		t.Fatalf("constants: unit %s max %s", Unit, Max)
	}
}

// TestSameSpot83 checks the published budget: neighbours 1 ms apart allow 83 moves to the same
// spot (always just above A) before the gap is exhausted.
func TestSameSpot83(t *testing.T) {
	lo, hi := FromMillis(1700000000000), FromMillis(1700000000001)
	moves := 0
	for {
		m, err := Between(lo, hi)
		if errors.Is(err, ErrNoGap) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hi = m
		moves++
	}
	if moves != 83 {
		t.Fatalf("moves before ErrNoGap = %d, want 83", moves)
	}
}

func TestBetweenErrors(t *testing.T) {
	x := FromMillis(5)
	if _, err := Between(x, x.Add(Seq{Lo: 1})); !errors.Is(err, ErrNoGap) {
		t.Fatalf("adjacent: %v", err)
	}
	if _, err := Between(x.Add(Seq{Lo: 1}), x); !errors.Is(err, ErrOrder) {
		t.Fatalf("reversed: %v", err)
	}
}

func TestSpread(t *testing.T) {
	lo, hi := Seq{Lo: 0}, Seq{Lo: 100}
	got, err := Spread(3, lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{25, 50, 75}
	for i := range want {
		if got[i].Lo != want[i] || got[i].Hi != 0 {
			t.Fatalf("Spread = %v, want %v", got, want)
		}
	}
	if _, err := Spread(3, Seq{Lo: 0}, Seq{Lo: 3}); !errors.Is(err, ErrNoGap) {
		t.Fatalf("Spread without room: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "17000000000000000000000000000000000000", "99999999999999999999999999999999999999", "100000000000000000000000000000000000000", "-1", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			return
		}
		back, err := Parse(v.String())
		if err != nil || back != v {
			t.Fatalf("round trip %q -> %s -> %v, %v", s, v, back, err)
		}
		k := v.Key()
		if FromKey(k[:]) != v {
			t.Fatalf("key round trip %s", v)
		}
	})
}

package zen_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

type idParts struct {
	Shard uint16
	Type  zen.Type
	Local uint64
}

func parts(id zen.ID) idParts { return idParts{id.Shard(), id.Type(), id.Local()} }

// TestIDVectors checks docs/data-model.md §4.
func TestIDVectors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want idParts
	}{
		{"241294492511762325", idParts{3429, zen.TypePin, 7075733}},
		{"241294561224164665", idParts{3429, zen.TypeBoard, 1337}},
		{"241294629943640797", idParts{3429, zen.TypeUser, 733}},
		{"68719476737", idParts{0, 1, 1}},
		{"288160144846487553", idParts{4095, 2, 1}},
		{"4611686018427387903", idParts{65535, 1023, 1<<36 - 1}},
	} {
		id, err := zen.ParseID(tc.in)
		if err != nil {
			t.Fatalf("ParseID(%s): %v", tc.in, err)
		}
		if diff := cmp.Diff(tc.want, parts(id)); diff != "" {
			t.Errorf("ParseID(%s) (-want +got):\n%s", tc.in, diff)
		}
		back, err := zen.NewID(tc.want.Shard, tc.want.Type, tc.want.Local)
		if err != nil {
			t.Fatalf("NewID(%v): %v", tc.want, err)
		}
		if back.String() != tc.in {
			t.Errorf("NewID(%v) = %s, want %s", tc.want, back, tc.in)
		}
	}
	max, _ := zen.NewID(65535, 1023, 1<<36-1)
	if uint64(max) != 1<<62-1 || max != zen.MaxID {
		t.Errorf("max id = %d, want 2^62-1", uint64(max))
	}
}

func TestNewIDRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		typ   zen.Type
		local uint64
	}{
		{"type 0", 0, 1},
		{"type 1024", 1024, 1},
		{"local 2^36", 1, 1 << 36},
		{"local max uint64", 1, ^uint64(0)},
	} {
		if id, err := zen.NewID(1, tc.typ, tc.local); err == nil {
			t.Errorf("%s: NewID = %d, want error", tc.name, id)
		}
	}
}

func TestParseIDRejects(t *testing.T) {
	for _, in := range []string{
		"", "abc", "-1", "1.5", " 68719476737", "68719476737 ", "+68719476737",
		"18446744073709551616", // 2^64
		"4611686018427387904",  // 2^62: reserved bit
		"9223372036854775808",  // 2^63
		"1",                    // type 0
		"0",
		"34359738367", // 2^35-1: type 0
	} {
		if id, err := zen.ParseID(in); err == nil {
			t.Errorf("ParseID(%q) = %d, want error", in, id)
		}
	}
}

func TestIDRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		want := idParts{uint16(r.Uint32()), zen.Type(1 + r.IntN(1023)), r.Uint64N(1 << 36)}
		id, err := zen.NewID(want.Shard, want.Type, want.Local)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(id)>>62 != 0 {
			t.Fatalf("%v: reserved bits set in %d", want, id)
		}
		if got := parts(id); got != want {
			t.Fatalf("round trip %v -> %v", want, got)
		}
		back, err := zen.ParseID(id.String())
		if err != nil || back != id {
			t.Fatalf("ParseID(String(%d)) = %d, %v", id, back, err)
		}
	}
}

func TestCheck(t *testing.T) {
	pin, _ := zen.NewID(3429, zen.TypePin, 7075733)
	if err := pin.Check(zen.TypePin); err != nil {
		t.Errorf("pin.Check(pin) = %v", err)
	}
	err := pin.Check(zen.TypeUser)
	if err == nil || !strings.Contains(err.Error(), "pin") || !strings.Contains(err.Error(), "user") {
		t.Errorf("pin.Check(user) = %v, want an error naming pin and user", err)
	}
	if err := zen.ID(1 << 63).Check(0); err == nil {
		t.Error("reserved bits: Check passed")
	}
}

// TestModShardVectors checks docs/data-model.md §4: md5 as a 128-bit big-endian integer mod 4096.
func TestModShardVectors(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"", 638}, {"foo", 1240}, {"1.2.3.4", 1537}, {"user@example.com", 2479},
	} {
		if got := zen.ModShard(tc.key, 4096); got != tc.want {
			t.Errorf("ModShard(%q, 4096) = %d, want %d", tc.key, got, tc.want)
		}
		if got := zen.ModShard(tc.key, 0); got != tc.want {
			t.Errorf("ModShard(%q, 0) = %d, want the 4096 default %d", tc.key, got, tc.want)
		}
	}
	// A modulus that is not a power of two uses the whole 128 bits: md5("foo") mod 1000.
	// acbd18db4cc2f85cedef654fccc4a4d8 = 229609063533823256041787889330700985560 -> 560.
	if got := zen.ModShard("foo", 1000); got != 560 {
		t.Errorf("ModShard(foo, 1000) = %d, want 560", got)
	}
}

// TestWireID: the one rule every service applies to an ID sent as a number, a decimal
// string, or both.
func TestWireID(t *testing.T) {
	user, err := zen.NewID(7, zen.TypeUser, 42)
	if err != nil {
		t.Fatal(err)
	}
	us := user.String()
	for _, tt := range []struct {
		name    string
		n       uint64
		s       string
		want    zen.ID
		wantErr string // a substring; "" = no error
	}{
		{"neither", 0, "", 0, ""},
		{"number", uint64(user), "", user, ""},
		{"string", 0, us, user, ""},
		{"both agree", uint64(user), us, user, ""},
		{"both disagree", uint64(user) + 1, us, 0, "disagree"},
		{"string not decimal", 0, "0x12", 0, "not a decimal"},
		{"string negative", 0, "-1", 0, "not a decimal"},
		{"string zero", 0, "0", 0, "type 0"},
		{"string reserved bits", 0, "18446744073709551615", 0, "reserved"},
		{"number type 0", 5, "", 0, "type 0"},
		{"number reserved bits", 1 << 63, "", 0, "reserved"},
		{"bad string beside a good number", uint64(user), "x", 0, "not a decimal"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := zen.WireID(tt.n, tt.s)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && !strings.Contains(gotErr, tt.wantErr) {
				t.Fatalf("WireID(%d, %q) error %q, want %q", tt.n, tt.s, gotErr, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("WireID(%d, %q) (-want +got):\n%s", tt.n, tt.s, diff)
			}
		})
	}
}

// FuzzWireID: WireID never panics; what it accepts is zero or Valid, agrees with each form
// given, and round-trips through both forms.
func FuzzWireID(f *testing.F) {
	user, err := zen.NewID(7, zen.TypeUser, 42)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint64(0), "")
	f.Add(uint64(user), user.String())
	f.Add(uint64(user), "")
	f.Add(uint64(0), "0")
	f.Add(uint64(1)<<63, "9223372036854775808")
	f.Fuzz(func(t *testing.T, n uint64, s string) {
		id, err := zen.WireID(n, s)
		if err != nil {
			if id != 0 {
				t.Fatalf("WireID(%d, %q) = %d with error %v", n, s, id, err)
			}
			return
		}
		if id != 0 && !id.Valid() {
			t.Fatalf("WireID(%d, %q) = %d, not Valid", n, s, id)
		}
		if n != 0 && uint64(id) != n {
			t.Fatalf("WireID(%d, %q) = %d, not the number", n, s, id)
		}
		if s != "" && id.String() != s {
			// ParseUint accepts only canonical decimal without a sign, except leading zeros.
			if p, perr := zen.ParseID(s); perr != nil || p != id {
				t.Fatalf("WireID(%d, %q) = %d, not the string", n, s, id)
			}
		}
		if id != 0 {
			back, err := zen.WireID(uint64(id), id.String())
			if err != nil || back != id {
				t.Fatalf("round trip of %d: %d, %v", id, back, err)
			}
		}
	})
}

// TestIDErrorsSayWhatIsWrong: an ID refused for its type says, in words, the type it has and
// the one wanted, rather than a bare "type 0".
func TestIDErrorsSayWhatIsWrong(t *testing.T) {
	pin, _ := zen.NewID(3, zen.TypePin, 7)
	user, _ := zen.NewID(3, zen.TypeUser, 7)
	odd, _ := zen.NewID(3, 9, 7)
	for _, tt := range []struct {
		name string
		err  func() error
		want string
	}{
		{"parse type 0", func() error { _, err := zen.ParseID("5"); return err }, `parse id "5": ID 5 has type 0 (none); an object's ID has type 1 (pin), 2 (board), 3 (user) or 4 (interest) in bits 36-45 (` + "`smartfeed id decode ID`" + ` shows its parts)`},
		{"wire number type 0", func() error { _, err := zen.WireID(5, ""); return err }, "ID 5 has type 0 (none); an object's ID has type 1 (pin), 2 (board), 3 (user) or 4 (interest) in bits 36-45 (`smartfeed id decode ID` shows its parts)"},
		{"wire number reserved bits", func() error { _, err := zen.WireID(1<<63, ""); return err }, "id 9223372036854775808 is not a valid ID: its reserved top two bits are set"},
		{"check type 0", func() error { return zen.ID(5).Check(zen.TypePin) }, "ID 5 has type 0 (none); want a pin ID (type 1)"},
		{"check user for pin", func() error { return user.Check(zen.TypePin) }, "ID " + user.String() + " has type 3 (user); want a pin ID (type 1)"},
		{"check unnamed type", func() error { return odd.Check(zen.TypeUser) }, "ID " + odd.String() + " has type 9; want a user ID (type 3)"},
		{"check ok", func() error { return pin.Check(zen.TypePin) }, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := tt.err(); err != nil {
				got = err.Error()
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("error (-want +got):\n%s", d)
			}
		})
	}
}

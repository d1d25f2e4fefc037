package zentest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/smartfeed/smartfeed/zen"
)

// RunRandomized replays the same n random operations (seeded) on a and b, which must start
// empty, and fails at the first result that differs. Keys come from a small alphabet so that
// scans, batches and compare-and-sets keep hitting the same rows. Use the reference model
// (zenmem) as a and the backend under test as b.
func RunRandomized(t *testing.T, a, b zen.Table, seed uint64, n int) {
	t.Helper()
	ctx := tableCtx(t)
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	key := func() []byte {
		k := make([]byte, 1+r.IntN(3))
		for i := range k {
			k[i] = "ab\x00\xff"[r.IntN(4)]
		}
		return k
	}
	bound := func() []byte {
		if r.IntN(4) == 0 {
			return nil
		}
		return key()
	}
	values := [][]byte{{}, []byte("x"), []byte("yy"), []byte("1234567"), []byte("123456789"),
		tableCounter(0), tableCounter(-1), tableCounter(42)}
	value := func() []byte { return values[r.IntN(len(values))] }
	for i := range n {
		op := r.IntN(5)
		var args []any
		switch op {
		case 0:
			args = []any{key()}
		case 1:
			var muts []zen.Mutation
			for range 1 + r.IntN(4) {
				muts = append(muts, zen.Mutation{Key: key(), Value: value(), Delete: r.IntN(3) == 0})
			}
			args = []any{muts}
		case 2:
			args = []any{zen.ScanOptions{Start: bound(), Stop: bound(), Reverse: r.IntN(2) == 0, Limit: r.IntN(5)}}
		case 3:
			k := key()
			var expected []byte
			switch r.IntN(3) {
			case 0: // nil: only if absent
			case 1:
				expected = value()
			default: // the current value, so that swaps succeed often
				if v, err := a.Get(ctx, k); err == nil {
					expected = v
				} else {
					expected = value()
				}
			}
			var v []byte
			if r.IntN(3) > 0 {
				v = value()
			}
			args = []any{k, expected, v}
		default:
			args = []any{key(), int64(r.IntN(11) - 5)}
		}
		ra, rb := runRandomOp(ctx, a, op, args), runRandomOp(ctx, b, op, args)
		if diff := cmp.Diff(ra, rb, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("seed %d op %d: %s%q: results differ (-model +backend):\n%s",
				seed, i, [...]string{"Get", "Apply", "Scan", "CheckAndSet", "Increment"}[op], args, diff)
		}
	}
	full := func(tb zen.Table) []zen.KV {
		rows, err := tb.Scan(ctx, zen.ScanOptions{})
		if err != nil {
			t.Fatalf("final Scan: %v", err)
		}
		return rows
	}
	if diff := cmp.Diff(full(a), full(b), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("seed %d: final contents differ (-model +backend):\n%s", seed, diff)
	}
}

// randomResult is what one of RunRandomized's operations returned, compared across tables.
type randomResult struct {
	Value []byte
	Rows  []zen.KV
	OK    bool
	N     int64
	Err   string // errKind of the error
}

// runRandomOp runs RunRandomized's operation op (Get, Apply, Scan, CheckAndSet, Increment) with
// args on tb.
func runRandomOp(ctx context.Context, tb zen.Table, op int, args []any) randomResult {
	switch op {
	case 0:
		v, err := tb.Get(ctx, args[0].([]byte))
		return randomResult{Value: v, Err: errKind(err)}
	case 1:
		return randomResult{Err: errKind(tb.Apply(ctx, args[0].([]zen.Mutation)))}
	case 2:
		rows, err := tb.Scan(ctx, args[0].(zen.ScanOptions))
		return randomResult{Rows: rows, Err: errKind(err)}
	case 3:
		ok, err := tb.CheckAndSet(ctx, args[0].([]byte), args[1].([]byte), args[2].([]byte))
		return randomResult{OK: ok, Err: errKind(err)}
	default:
		v, err := tb.Increment(ctx, args[0].([]byte), args[1].(int64))
		return randomResult{N: v, Err: errKind(err)}
	}
}

// tableCASMany checks the optional zen.CondBatcher against sequential CheckAndSets on a second
// table (ref) holding the same rows: the same results, in order, and the same rows afterwards.
func tableCASMany(t *testing.T, tb, ref zen.Table) {
	cb, ok := tb.(zen.CondBatcher)
	if !ok {
		t.Skip("table does not implement zen.CondBatcher")
	}
	ctx := tableCtx(t)
	seed := []zen.Mutation{tablePut("a", "1"), tablePut("e", ""), tablePut("d", "4"), tablePut("c8", "")}
	tableMustApply(t, tb, seed...)
	tableMustApply(t, ref, seed...)
	b := func(s string) []byte { return []byte(s) }
	check := func(name string, conds []zen.Cond) {
		t.Helper()
		checkCASMany(ctx, t, cb, tb, ref, name, conds)
	}
	got, err := cb.CheckAndSetMany(ctx, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("CheckAndSetMany(nil) = %v, %v; want no results", got, err)
	}
	check("fixed", []zen.Cond{
		{Key: b("new"), Expected: nil, Value: b("n1")},        // put if absent: wins
		{Key: b("a"), Expected: nil, Value: b("x")},           // put if absent, present: loses
		{Key: b("d"), Expected: b("0"), Value: b("x")},        // wrong expected
		{Key: b("d"), Expected: b("4"), Value: b("5")},        // swap (after a loss on the same key)
		{Key: b("e"), Expected: b(""), Value: b("was empty")}, // swap from empty
		{Key: b("gone"), Expected: b(""), Value: b("x")},      // expecting empty on absent
		{Key: b("c8"), Expected: b(""), Value: nil},           // delete if empty
		{Key: b("a"), Expected: b("1"), Value: nil},           // delete if equal
		{Key: b("none"), Expected: nil, Value: nil},           // delete if absent, absent: holds
		{Key: b("empty"), Expected: nil, Value: b("")},        // put an empty value
		{Key: b("empty"), Expected: nil, Value: b("x")},       // ...which is present
		// The same key several times: each sees what the earlier ones left.
		{Key: b("k"), Expected: nil, Value: b("v1")},
		{Key: b("k"), Expected: b("v1"), Value: b("v2")},
		{Key: b("k"), Expected: nil, Value: b("v3")},
		{Key: b("k"), Expected: b("v2"), Value: nil},
		{Key: b("k"), Expected: b("v2"), Value: b("v4")},
		{Key: b("k"), Expected: nil, Value: b("v5")},
		{Key: b("new"), Expected: b("n1"), Value: b("n2")},
	})
	tableWant(t, tb, "k", b("v5"))
	tableWant(t, tb, "empty", []byte{})
	tableWant(t, tb, "a", nil)
	// Random rounds over a few keys.
	rng := rand.New(rand.NewPCG(7, 11))
	vals := [][]byte{nil, {}, b("p"), b("q"), b("r"), tableCounter(3)}
	for round := range 20 {
		check(fmt.Sprintf("round %d", round), randomConds(ctx, rng, ref, vals))
	}
	// A bad key fails the call before any write.
	before, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.CheckAndSetMany(ctx, []zen.Cond{{Key: b("zz"), Value: b("x")}, {Key: nil, Value: b("x")}}); err == nil {
		t.Fatalf("CheckAndSetMany with an empty key: no error")
	}
	after, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("a refused CheckAndSetMany wrote (-before +after):\n%s", diff)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cb.CheckAndSetMany(cctx, []zen.Cond{{Key: b("zz"), Value: b("x")}}); err == nil {
		t.Fatalf("CheckAndSetMany with a cancelled context: no error")
	}
	tableWant(t, tb, "zz", nil)
}

// tableConcurrentCASMany races CheckAndSetMany calls against single CheckAndSets on the same
// keys: every key has exactly one winner, and holds the winner's value.
func tableConcurrentCASMany(t *testing.T, tb zen.Table) {
	cb, ok := tb.(zen.CondBatcher)
	if !ok {
		t.Skip("table does not implement zen.CondBatcher")
	}
	const keys, many, single = 12, 4, 8
	ctx := tableCtx(t)
	key := func(k int) []byte { return fmt.Appendf(nil, "m%02d", k) }
	for round := range 4 {
		var dels []zen.Mutation
		for k := range keys {
			dels = append(dels, zen.Mutation{Key: key(k), Delete: true})
		}
		tableMustApply(t, tb, dels...)
		var mu sync.Mutex
		winners := make([][]string, keys)
		win := func(k int, who string) {
			mu.Lock()
			defer mu.Unlock()
			winners[k] = append(winners[k], who)
		}
		tableRace(t, many+single*keys, func(i int) (bool, error) {
			if i < many {
				// Each batch names the keys in its own order, some twice.
				conds := make([]zen.Cond, 0, keys+2)
				who := fmt.Sprintf("many%d", i)
				for j := range keys {
					conds = append(conds, zen.Cond{Key: key((j + i*5) % keys), Value: []byte(who)})
				}
				conds = append(conds, zen.Cond{Key: key(i), Value: []byte(who)}, zen.Cond{Key: key(i + 1), Value: []byte(who)})
				got, err := cb.CheckAndSetMany(ctx, conds)
				if err != nil {
					return false, err
				}
				for j, ok := range got {
					if ok {
						k, _ := strconv.Atoi(string(conds[j].Key[1:]))
						win(k, who)
					}
				}
				return false, nil
			}
			k, who := (i-many)%keys, fmt.Sprintf("single%d", i)
			ok, err := tb.CheckAndSet(ctx, key(k), nil, []byte(who))
			if ok {
				win(k, who)
			}
			return false, err
		})
		for k := range keys {
			if len(winners[k]) != 1 {
				t.Fatalf("round %d: key %s: winners %v, want exactly one", round, key(k), winners[k])
			}
			tableWant(t, tb, string(key(k)), []byte(winners[k][0]))
		}
	}
}

// checkCASMany runs conds on tb's CheckAndSetMany (cb) and as sequential CheckAndSets on ref, and
// fails t unless the results and the tables' contents are the same.
func checkCASMany(ctx context.Context, t *testing.T, cb zen.CondBatcher, tb, ref zen.Table, name string, conds []zen.Cond) {
	t.Helper()
	got, err := cb.CheckAndSetMany(ctx, conds)
	if err != nil {
		t.Fatalf("%s: CheckAndSetMany: %v", name, err)
	}
	want := make([]bool, len(conds))
	for i, c := range conds {
		if want[i], err = ref.CheckAndSet(ctx, c.Key, c.Expected, c.Value); err != nil {
			t.Fatalf("%s: CheckAndSet %d: %v", name, i, err)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: results (-sequential CheckAndSet +CheckAndSetMany):\n%s", name, diff)
	}
	wantRows, err := ref.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gotRows, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantRows, gotRows); diff != "" {
		t.Fatalf("%s: rows (-sequential CheckAndSet +CheckAndSetMany):\n%s", name, diff)
	}

}

// randomConds draws up to 40 conditions over a few keys: expected values are ref's current one,
// a stale one, absent or empty; values are puts (some empty) and deletes.
func randomConds(ctx context.Context, rng *rand.Rand, ref zen.Table, vals [][]byte) []zen.Cond {
	conds := make([]zen.Cond, 1+rng.IntN(40))
	for i := range conds {
		k := fmt.Appendf(nil, "r%d", rng.IntN(8))
		var exp []byte
		if rng.IntN(2) == 0 {
			cur, err := ref.Get(ctx, k)
			if err == nil {
				exp = cur
			}
		} else {
			exp = vals[rng.IntN(len(vals))]
		}
		conds[i] = zen.Cond{Key: k, Expected: exp, Value: vals[rng.IntN(len(vals))]}
	}
	return conds
}

package zentest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
)

func tableCAS(t *testing.T, tb zen.Table) {
	ctx := tableCtx(t)
	k := []byte("cas")
	steps := []struct {
		name            string
		expected, value []byte
		wantOK          bool
		wantAfter       []byte // nil = absent
	}{
		{"set on absent expecting a value", []byte("x"), []byte("y"), false, nil},
		{"delete-if-equal on absent", []byte("x"), nil, false, nil},
		{"put if absent", nil, []byte("v1"), true, []byte("v1")},
		{"put if absent again", nil, []byte("v2"), false, []byte("v1")},
		{"swap with wrong expected", []byte("v0"), []byte("v2"), false, []byte("v1")},
		{"swap with a prefix of the value", []byte("v"), []byte("v2"), false, []byte("v1")},
		{"swap", []byte("v1"), []byte("v2"), true, []byte("v2")},
		{"swap to the same value", []byte("v2"), []byte("v2"), true, []byte("v2")},
		{"delete only if absent, present", nil, nil, false, []byte("v2")},
		{"delete-if-equal wrong", []byte("v1"), nil, false, []byte("v2")},
		{"delete-if-equal", []byte("v2"), nil, true, nil},
		{"delete-if-equal again", []byte("v2"), nil, false, nil},
		{"delete only if absent, absent", nil, nil, true, nil},
		{"put 8 bytes if absent", nil, tableCounter(7), true, tableCounter(7)},
		{"swap 8 bytes", tableCounter(7), []byte("short"), true, []byte("short")},
	}
	for _, s := range steps {
		ok, err := tb.CheckAndSet(ctx, k, s.expected, s.value)
		if err != nil {
			t.Fatalf("%s: CheckAndSet: %v", s.name, err)
		}
		if ok != s.wantOK {
			t.Fatalf("%s: CheckAndSet(%q, %q) = %v, want %v", s.name, s.expected, s.value, ok, s.wantOK)
		}
		tableWant(t, tb, "cas", s.wantAfter)
	}
	// A row written by Apply is seen by CheckAndSet and the other way round.
	tableMustApply(t, tb, tablePut("cas", "applied"))
	if ok, err := tb.CheckAndSet(ctx, k, []byte("applied"), []byte("cas")); err != nil || !ok {
		t.Fatalf("CheckAndSet after Apply = %v, %v", ok, err)
	}
	tableWant(t, tb, "cas", []byte("cas"))
	// A delete by Apply makes the row absent for put-if-absent.
	tableMustApply(t, tb, tableDel("cas"))
	if ok, err := tb.CheckAndSet(ctx, k, nil, []byte("again")); err != nil || !ok {
		t.Fatalf("put-if-absent after Apply delete = %v, %v", ok, err)
	}
	tableWant(t, tb, "cas", []byte("again"))
}

// tableCASEmpty checks that an empty value is present, not absent.
func tableCASEmpty(t *testing.T, tb zen.Table) {
	ctx := tableCtx(t)
	k := []byte("e")
	if ok, err := tb.CheckAndSet(ctx, k, []byte{}, []byte("x")); err != nil || ok {
		t.Fatalf("expecting empty on absent = %v, %v; want false", ok, err)
	}
	if ok, err := tb.CheckAndSet(ctx, k, nil, []byte{}); err != nil || !ok {
		t.Fatalf("put empty if absent = %v, %v; want true", ok, err)
	}
	tableWant(t, tb, "e", []byte{})
	if ok, err := tb.CheckAndSet(ctx, k, nil, []byte("x")); err != nil || ok {
		t.Fatalf("put if absent over an empty value = %v, %v; want false", ok, err)
	}
	if ok, err := tb.CheckAndSet(ctx, k, []byte{}, []byte("x")); err != nil || !ok {
		t.Fatalf("swap from empty = %v, %v; want true", ok, err)
	}
	tableWant(t, tb, "e", []byte("x"))
	tableMustApply(t, tb, tablePut("e", ""))
	if ok, err := tb.CheckAndSet(ctx, k, []byte{}, nil); err != nil || !ok {
		t.Fatalf("delete if empty = %v, %v; want true", ok, err)
	}
	tableWant(t, tb, "e", nil)
}

func tableIncrement(t *testing.T, tb zen.Table) {
	ctx := tableCtx(t)
	k := []byte("n")
	for _, s := range []struct{ delta, want int64 }{{5, 5}, {-7, -2}, {0, -2}, {1 << 40, 1<<40 - 2}} {
		got, err := tb.Increment(ctx, k, s.delta)
		if err != nil || got != s.want {
			t.Fatalf("Increment(%d) = %d, %v; want %d", s.delta, got, err, s.want)
		}
		tableWant(t, tb, "n", tableCounter(s.want))
	}
	// An 8-byte value written by Apply is a counter.
	tableMustApply(t, tb, zen.Mutation{Key: []byte("m"), Value: tableCounter(-1)})
	if got, err := tb.Increment(ctx, []byte("m"), 3); err != nil || got != 2 {
		t.Fatalf("Increment of an applied counter = %d, %v; want 2", got, err)
	}
	// A value of any other length is not a counter: error, and the value stays.
	for _, v := range []string{"abc", "", "1234567", "123456789"} {
		tableMustApply(t, tb, tablePut("s", v))
		if got, err := tb.Increment(ctx, []byte("s"), 1); err == nil {
			t.Fatalf("Increment of %q = %d, want an error", v, got)
		}
		tableWant(t, tb, "s", []byte(v))
	}
}

func tableConcurrentIncrement(t *testing.T, tb zen.Table) {
	const workers, each = 8, 40
	ctx := tableCtx(t)
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				n, err := tb.Increment(ctx, []byte("ctr"), 1)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if seen[n] {
					mu.Unlock()
					errs <- fmt.Errorf("value %d returned twice", n)
					return
				}
				seen[n] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := int64(1); i <= workers*each; i++ {
		if !seen[i] {
			t.Fatalf("no Increment returned %d", i)
		}
	}
	tableWant(t, tb, "ctr", tableCounter(workers*each))
}

// tableRace runs fn in n goroutines released together and returns how many reported true.
func tableRace(t *testing.T, n int, fn func(i int) (bool, error)) []int {
	t.Helper()
	start := make(chan struct{})
	var mu sync.Mutex
	var winners []int
	var errs []error
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ok, err := fn(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				winners = append(winners, i)
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return winners
}

func tableConcurrentCAS(t *testing.T, tb zen.Table) {
	const n = 16
	ctx := tableCtx(t)
	k := []byte("race")
	val := func(i int) []byte { return fmt.Appendf(nil, "w%02d", i) }
	for round := range 5 {
		tableMustApply(t, tb, zen.Mutation{Key: k, Delete: true})
		w := tableRace(t, n, func(i int) (bool, error) { return tb.CheckAndSet(ctx, k, nil, val(i)) })
		if len(w) != 1 {
			t.Fatalf("round %d: put-if-absent winners %v, want exactly one", round, w)
		}
		tableWant(t, tb, "race", val(w[0]))
		cur := val(w[0])
		w = tableRace(t, n, func(i int) (bool, error) { return tb.CheckAndSet(ctx, k, cur, val(100+i)) })
		if len(w) != 1 {
			t.Fatalf("round %d: swap winners %v, want exactly one", round, w)
		}
		cur = val(100 + w[0])
		tableWant(t, tb, "race", cur)
		w = tableRace(t, n, func(int) (bool, error) { return tb.CheckAndSet(ctx, k, cur, nil) })
		if len(w) != 1 {
			t.Fatalf("round %d: delete-if-equal winners %v, want exactly one", round, w)
		}
		tableWant(t, tb, "race", nil)
	}
}

// tableConcurrentCASCounter counts with read + CheckAndSet loops: a lost update would lose a count.
func tableConcurrentCASCounter(t *testing.T, tb zen.Table) {
	const workers, each = 4, 15
	ctx := tableCtx(t)
	k := []byte("cas-ctr")
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				for {
					cur, err := tb.Get(ctx, k)
					var next []byte
					switch {
					case errors.Is(err, zen.ErrNotFound):
						cur, next = nil, []byte("1")
					case err != nil:
						errs <- err
						return
					default:
						var n int
						fmt.Sscan(string(cur), &n)
						next = fmt.Append(nil, n+1)
					}
					ok, err := tb.CheckAndSet(ctx, k, cur, next)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tableWant(t, tb, "cas-ctr", fmt.Append(nil, workers*each))
}

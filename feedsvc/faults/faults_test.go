package faults

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

func newTable(t *testing.T, seed uint64) *Table {
	t.Helper()
	inner, err := zenmem.New().Table(t.Context(), "feed")
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Apply(t.Context(), []zen.Mutation{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	return Wrap(inner, seed)
}

func TestNoFaultsPassesThrough(t *testing.T) {
	tb := newTable(t, 1)
	v, err := tb.Get(t.Context(), []byte("k"))
	if err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v; want v", v, err)
	}
	if _, err := tb.Get(t.Context(), []byte("x")); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("Get missing = %v, want ErrNotFound", err)
	}
	vs, err := tb.GetMany(t.Context(), [][]byte{[]byte("x"), []byte("k")})
	if err != nil || len(vs) != 2 || vs[0] != nil || string(vs[1]) != "v" {
		t.Errorf("GetMany = %q, %v; want [nil v]", vs, err)
	}
}

func TestOutageSwitchesAtRunTime(t *testing.T) {
	tb := newTable(t, 1)
	if err := tb.Set(Config{Outage: true}); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func() error{
		"get":   func() error { _, err := tb.Get(t.Context(), []byte("k")); return err },
		"many":  func() error { _, err := tb.GetMany(t.Context(), [][]byte{[]byte("k")}); return err },
		"scan":  func() error { _, err := tb.Scan(t.Context(), zen.ScanOptions{}); return err },
		"apply": func() error { return tb.Apply(t.Context(), []zen.Mutation{{Key: []byte("a"), Value: []byte("b")}}) },
		"cas":   func() error { _, err := tb.CheckAndSet(t.Context(), []byte("c"), nil, []byte("d")); return err },
		"incr":  func() error { _, err := tb.Increment(t.Context(), []byte("n"), 1); return err },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, ErrOutage) {
			t.Errorf("%s during outage = %v, want ErrOutage", name, err)
		}
	}
	if _, err := tb.inner.Get(t.Context(), []byte("a")); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("a write during the outage reached the table: %v", err)
	}
	if err := tb.Set(Config{}); err != nil {
		t.Fatal(err)
	}
	for name, op := range ops {
		if err := op(); err != nil {
			t.Errorf("%s after the outage = %v", name, err)
		}
	}
}

func TestErrorRateIsSeededAndNearTheRate(t *testing.T) {
	run := func(seed uint64) (fails []bool) {
		tb := newTable(t, seed)
		if err := tb.Set(Config{ErrorRate: 0.3}); err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			_, err := tb.Get(t.Context(), []byte("k"))
			fails = append(fails, errors.Is(err, ErrInjected))
		}
		return fails
	}
	a, b := run(7), run(7)
	n := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("call %d differs between two runs with one seed", i)
		}
		if a[i] {
			n++
		}
	}
	if n < 250 || n > 350 {
		t.Errorf("%d of 1000 calls failed, want about 300", n)
	}
}

func TestSlowFractionAndCancellation(t *testing.T) {
	tb := newTable(t, 3)
	if err := tb.Set(Config{SlowFraction: 1, Slow: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := tb.Get(ctx, []byte("k")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slowed Get = %v, want the context's deadline", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a cancelled slow call took %v", took)
	}
	if err := tb.Set(Config{SlowFraction: 0.5, Slow: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	before := tb.Stats().Slowed
	for range 20 {
		if _, err := tb.Get(t.Context(), []byte("k")); err != nil {
			t.Fatal(err)
		}
	}
	if n := tb.Stats().Slowed - before; n < 4 || n > 16 {
		t.Errorf("%d of 20 calls slowed, want about 10", n)
	}
}

func TestValidate(t *testing.T) {
	tb := newTable(t, 1)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{ErrorRate: 2}, "error rate"},
		{Config{SlowFraction: -1}, "slow fraction"},
		{Config{Slow: -time.Second}, "slow delay"},
		{Config{Base: time.Hour}, "base delay"},
	} {
		if err := tb.Set(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Set(%+v) = %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
	if got := tb.Config(); got != (Config{}) {
		t.Errorf("refused configs changed the table: %+v", got)
	}
}

// TestForwardsExtensions: a fault-injecting table keeps every optional extension of the table it
// wraps.
func TestForwardsExtensions(t *testing.T) {
	base, err := zenmem.New().Table(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	zentest.RunForwarding(t, base, func(inner zen.Table) zen.Table { return Wrap(inner, 1) })
}

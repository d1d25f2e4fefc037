package zentest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
)

// Extensions are the optional extensions of zen.Table that a wrapper (a Table over another
// Table: a cache, a router, a fault injector) must forward, so that wrapping a table never
// silently costs it a capability: each one, on a backend that has it, is one call instead of
// many. TestExtensionsListed holds this list to the interfaces zen declares as optional
// extensions of Table.
var Extensions = []reflect.Type{
	reflect.TypeFor[zen.MultiGetter](),
	reflect.TypeFor[zen.MultiScanner](),
	reflect.TypeFor[zen.Carrier](),
	reflect.TypeFor[zen.CondBatcher](),
}

// NotForwarded are the optional extensions a wrapper must not forward, with the reason.
var NotForwarded = map[reflect.Type]string{
	reflect.TypeFor[zen.Logged](): "a wrapper may route one table's rows to several stores, so it cannot vouch for one log (zen.SameLog)",
}

// RunForwarding checks that wrap(inner) forwards every extension of Extensions to inner: the
// wrapped table implements each one, and calling it reaches inner's own method (not a fallback
// of single-row calls). base is an empty table of any backend; RunForwarding puts a probe over
// it that has every extension and records which ones were called.
func RunForwarding(t *testing.T, base zen.Table, wrap func(inner zen.Table) zen.Table) {
	t.Helper()
	p := &probe{Table: base, called: map[string]bool{}}
	w := wrap(p)
	ctx := t.Context()
	key := func(s string) []byte { return []byte("fwd/" + s) }
	calls := map[reflect.Type]func() error{
		reflect.TypeFor[zen.MultiGetter](): func() error {
			_, err := w.(zen.MultiGetter).GetMany(ctx, [][]byte{key("a"), key("b")})
			return p.reached(err, "GetMany")
		},
		reflect.TypeFor[zen.MultiScanner](): func() error {
			_, err := w.(zen.MultiScanner).ScanMany(ctx, []zen.ScanOptions{{Start: key("a"), Stop: key("b")}, {Start: key("c"), Stop: key("d")}})
			return p.reached(err, "ScanMany")
		},
		reflect.TypeFor[zen.Carrier](): func() error {
			extra := []zen.Mutation{{Key: key("extra"), Value: []byte("x")}}
			if _, err := w.(zen.Carrier).CheckAndSetWith(ctx, key("cas"), nil, []byte("v"), extra); p.reached(err, "CheckAndSetWith") != nil {
				return p.reached(err, "CheckAndSetWith")
			}
			_, err := w.(zen.Carrier).IncrementWith(ctx, key("n"), 1, extra)
			return p.reached(err, "IncrementWith")
		},
		reflect.TypeFor[zen.CondBatcher](): func() error {
			_, err := w.(zen.CondBatcher).CheckAndSetMany(ctx, []zen.Cond{{Key: key("m1"), Value: []byte("1")}, {Key: key("m2"), Value: []byte("2")}})
			return p.reached(err, "CheckAndSetMany")
		},
	}
	for _, ext := range Extensions {
		if !reflect.TypeOf(w).Implements(ext) {
			t.Errorf("%T does not implement %v: wrapping a table loses it", w, ext)
			continue
		}
		call, ok := calls[ext]
		if !ok {
			t.Errorf("RunForwarding has no call for %v: add one", ext)
			continue
		}
		if err := call(); err != nil {
			t.Errorf("%T, %v: %v", w, ext, err)
		}
	}
	for ext, why := range NotForwarded {
		if reflect.TypeOf(w).Implements(ext) {
			t.Errorf("%T implements %v, which wrappers must not: %s", w, ext, why)
		}
	}
}

// probe is a Table with every extension, recording which extension methods were called.
type probe struct {
	zen.Table
	mu     sync.Mutex
	called map[string]bool
}

func (p *probe) mark(m string) { p.mu.Lock(); p.called[m] = true; p.mu.Unlock() }

// reached reports a call that failed or did not reach the probe's method m.
func (p *probe) reached(err error, m string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", m, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.called[m] {
		return fmt.Errorf("%s did not reach the wrapped table's %s (a fallback ran instead)", m, m)
	}
	return nil
}

func (p *probe) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	p.mark("GetMany")
	return zen.GetMany(ctx, p.Table, keys)
}

func (p *probe) ScanMany(ctx context.Context, opts []zen.ScanOptions) ([][]zen.KV, error) {
	p.mark("ScanMany")
	return zen.ScanMany(ctx, p.Table, opts)
}

func (p *probe) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	p.mark("CheckAndSetMany")
	return zen.CheckAndSetMany(ctx, p.Table, conds)
}

func (p *probe) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	p.mark("CheckAndSetWith")
	c, ok := p.Table.(zen.Carrier)
	if !ok {
		return false, fmt.Errorf("probe: %w", errors.ErrUnsupported)
	}
	return c.CheckAndSetWith(ctx, key, expected, value, extra)
}

func (p *probe) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	p.mark("IncrementWith")
	c, ok := p.Table.(zen.Carrier)
	if !ok {
		return 0, fmt.Errorf("probe: %w", errors.ErrUnsupported)
	}
	return c.IncrementWith(ctx, key, delta, extra)
}

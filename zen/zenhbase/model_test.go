package zenhbase

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// droppingStore remembers the tables a test opened and drops them when the test ends, so the
// whole-API suites leave the shared HBase as they found it.
type droppingStore struct {
	*Store
	mu    sync.Mutex
	names map[string]bool
}

func (d *droppingStore) Table(ctx context.Context, name string) (zen.Table, error) {
	d.mu.Lock()
	d.names[name] = true
	d.mu.Unlock()
	return d.Store.Table(ctx, name)
}

// freshStore opens a store with a prefix of its own (so its tables start empty) and drops its
// tables at the end of the test.
func freshStore(t testing.TB) zen.Store {
	t.Helper()
	d := &droppingStore{Store: openStore(t, Options{}), names: map[string]bool{}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		d.mu.Lock()
		defer d.mu.Unlock()
		for name := range d.names {
			if err := d.Drop(ctx, name); err != nil {
				t.Errorf("drop %s: %v", name, err)
			}
		}
	})
	return d
}

// TestModel runs the whole zen API acceptance suite on the real HBase.
func TestModel(t *testing.T) {
	zentest.RunModel(t, func(t *testing.T) zen.Store { return freshStore(t) })
}

// TestModelRandomizedVsModel replays random zen operations on zenmem and on HBase and compares
// every result.
func TestModelRandomizedVsModel(t *testing.T) {
	for _, seed := range zentest.Seeds(t, 2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			zentest.RunModelRandomized(t, zenmem.New(), freshStore(t), seed, 400)
		})
	}
}

func BenchmarkModel(b *testing.B) {
	zentest.BenchModel(b, func(b *testing.B) zen.Store { return freshStore(b) })
}

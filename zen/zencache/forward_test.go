package zencache

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// oneTable is a store whose every table is t.
type oneTable struct {
	zen.Store
	t zen.Table
}

func (s oneTable) Table(context.Context, string) (zen.Table, error) { return s.t, nil }

// TestForwardsExtensions: a cached table keeps every optional extension of the store's table.
func TestForwardsExtensions(t *testing.T) {
	rdb := newRedis(t)
	_, prefix := testenv.RedisKeyPrefix(t, "zcfwd")
	base, err := zenmem.New().Table(t.Context(), zen.TableEdges)
	if err != nil {
		t.Fatal(err)
	}
	zentest.RunForwarding(t, base, func(inner zen.Table) zen.Table {
		c, err := Wrap(oneTable{zenmem.New(), inner}, rdb, Options{Prefix: prefix + ":", Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		tb, err := c.Table(t.Context(), zen.TableEdges)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tb.(*Table); !ok {
			t.Fatalf("%s is not cached", zen.TableEdges)
		}
		return tb
	})
}

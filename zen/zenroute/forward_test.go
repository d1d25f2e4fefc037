package zenroute_test

import (
	"context"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zenroute"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// oneTable is a store whose every table is t.
type oneTable struct {
	zen.Store
	t zen.Table
}

func (s oneTable) Table(context.Context, string) (zen.Table, error) { return s.t, nil }

// TestForwardsExtensions: a routed table keeps every optional extension of the stores' tables.
func TestForwardsExtensions(t *testing.T) {
	base, err := zenmem.New().Table(t.Context(), zen.TableObjects)
	if err != nil {
		t.Fatal(err)
	}
	zentest.RunForwarding(t, base, func(inner zen.Table) zen.Table {
		s, err := zenroute.New(map[string]zen.Store{"default": oneTable{zenmem.New(), inner}}, zen.DefaultShardMap(), zenroute.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tb, err := s.Table(t.Context(), zen.TableObjects)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tb.(*zenroute.Table); !ok {
			t.Fatalf("%s is not routed", zen.TableObjects)
		}
		return tb
	})
}

package zenmem_test

import (
	"testing"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// TestTable runs the table acceptance suite on the in-memory store the unit tests stand on.
func TestTable(t *testing.T) {
	zentest.RunTable(t, func(t *testing.T) zen.Table {
		tb, err := zenmem.New().Table(t.Context(), "t")
		if err != nil {
			t.Fatal(err)
		}
		return tb
	})
}

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestKeptHBaseDocs: make bench-docs keeps docs/benchmarks.md's HBase section, from its mark to
// the end, and nothing when the page has no such section.
func TestKeptHBaseDocs(t *testing.T) {
	section := hbaseDocsMark + "\n\n## HBase\n\nGetFeed p99 ...\n"
	for _, tc := range []struct {
		name string
		page *string // nil: no page
		want string
	}{
		{"no page", nil, ""},
		{"no section", ptr("# SmartFeed benchmark\n\n## Ratios\n"), ""},
		{"section", ptr("# SmartFeed benchmark\n\n## Machine\n\n" + section), "\n" + section},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.page != nil {
				if err := os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(*tc.page), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if d := cmp.Diff(tc.want, keptHBaseDocs(dir)); d != "" {
				t.Errorf("kept (-want +got):\n%s", d)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

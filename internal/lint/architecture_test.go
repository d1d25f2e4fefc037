package lint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestArchitectureMapsEveryPackage holds ARCHITECTURE.md's directory table to the tree: every
// package of the module has a row of its own, and every directory a row names exists.
func TestArchitectureMapsEveryPackage(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths, ok := ArchitecturePaths(string(doc))
	if !ok {
		t.Fatalf("ARCHITECTURE.md: no table under %q", ArchitectureTable)
	}
	module, pkgs, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, p := range pkgs {
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if p.ImportPath != module && !strings.HasPrefix(p.ImportPath, module+"/") {
			t.Fatalf("package %s is not in module %s", p.ImportPath, module)
		}
		dirs = append(dirs, filepath.ToSlash(rel))
	}
	if len(dirs) < 3 {
		t.Fatalf("go list found only %d packages", len(dirs))
	}
	for _, d := range UnmappedPackages(paths, dirs) {
		t.Errorf("package directory %s/ has no row in ARCHITECTURE.md's table", d)
	}
	for _, p := range paths {
		if strings.ContainsAny(p, "*?[") {
			if len(UnmappedPackages([]string{p}, dirs)) == len(dirs) {
				t.Errorf("ARCHITECTURE.md: pattern %s/ matches no package", p)
			}
			continue
		}
		if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil || !fi.IsDir() {
			t.Errorf("ARCHITECTURE.md: row %s/ names no directory of the tree", p)
		}
	}
}

func TestUnmappedPackages(t *testing.T) {
	doc := "# map\n\n" + ArchitectureTable + "\n|---|---|---|\n" +
		"| `zen/` | zen | — |\n" +
		"| `proto/`, `proto/*/v1/` | protos | — |\n" +
		"| `internal/quote/` | quote `not/a/path/` | — |\n" +
		"\nafter the table: `worker/`\n"
	paths, ok := ArchitecturePaths(doc)
	if !ok {
		t.Fatal("table not found")
	}
	if diff := cmp.Diff([]string{"zen", "proto", "proto/*/v1", "internal/quote"}, paths); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	dirs := []string{"zen", "zen/seq", "proto", "proto/feed/v1", "proto/feed/v2", "internal/quote", "worker"}
	if diff := cmp.Diff([]string{"zen/seq", "proto/feed/v2", "worker"}, UnmappedPackages(paths, dirs)); diff != "" {
		t.Errorf("unmapped (-want +got):\n%s", diff)
	}
	if _, ok := ArchitecturePaths("no table here"); ok {
		t.Error("found a table in a document without one")
	}
}

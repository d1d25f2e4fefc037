package zentest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExtensionsListed: every interface zen declares as an optional extension of Table is
// either in Extensions (wrappers forward it, RunForwarding checks them) or in NotForwarded, so a
// new extension cannot be added without the wrappers' check knowing it.
func TestExtensionsListed(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../table.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE || gd.Doc == nil || !strings.Contains(gd.Doc.Text(), "optional extension of Table") {
			continue
		}
		for _, s := range gd.Specs {
			if ts := s.(*ast.TypeSpec); isInterface(ts) {
				declared = append(declared, ts.Name.Name)
			}
		}
	}
	var listed []string
	for _, e := range Extensions {
		listed = append(listed, e.Name())
	}
	for e := range NotForwarded {
		listed = append(listed, e.Name())
	}
	slices.Sort(declared)
	slices.Sort(listed)
	if len(declared) < 5 {
		t.Fatalf("found only %v in zen/table.go: has the doc wording \"optional extension of Table\" changed?", declared)
	}
	if diff := cmp.Diff(declared, listed); diff != "" {
		t.Errorf("optional extensions of zen.Table (-declared in zen +listed in Extensions or NotForwarded):\n%s", diff)
	}
}

func isInterface(ts *ast.TypeSpec) bool { _, ok := ts.Type.(*ast.InterfaceType); return ok }

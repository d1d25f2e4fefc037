package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strings"
)

// SleepMark is the comment that lets a test's time.Sleep stand outside a loop: the sleep's
// point is the passage of real time itself (a TTL or a deadline under test, a pause the code
// under test must see), not waiting for another goroutine or process. It goes on the line of
// the call or the line before it, followed by the reason: "// sleep: the 50 ms TTL expires".
const SleepMark = "sleep:"

// BareSleep is a time.Sleep in a test that is neither inside a loop (polling a condition,
// pacing a load) nor marked with SleepMark: a sleep whose length is the synchronization.
type BareSleep struct {
	// Pos is "path:line", the path slash-separated and relative to the root.
	Pos string
	// Func is the enclosing top-level function.
	Func string
	line int
}

// String implements fmt.Stringer.
func (b BareSleep) String() string { return b.Pos + " (" + b.Func + ")" }

// BareSleeps walks the Go module at root (not nested modules, testdata, third_party or vendor)
// and returns the time.Sleep calls of its _test.go files that are neither inside a for or range
// loop of the same function (function literals count as their own functions) nor marked with
// SleepMark, sorted by position.
func BareSleeps(root string) ([]BareSleep, error) {
	var out []BareSleep
	err := walkModule(root, func(_, rel string, src []byte) error {
		if !strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		found, err := bareSleepsIn(rel, src)
		out = append(out, found...)
		return err
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].line < out[j].line })
	sort.SliceStable(out, func(i, j int) bool { return fileOf(out[i].Pos) < fileOf(out[j].Pos) })
	return out, err
}

// bareSleepsIn returns the bare sleeps of one test file's source, named rel.
func bareSleepsIn(rel string, src []byte) ([]BareSleep, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", rel, err)
	}
	timeName := importName(f, "time")
	if timeName == "" {
		return nil, nil
	}
	marked := map[int]bool{} // lines with a SleepMark comment
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if strings.Contains(c.Text, SleepMark) {
				marked[fset.Position(c.Slash).Line] = true
			}
		}
	}
	var out []BareSleep
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		// stack holds the enclosing nodes; a call is in a loop when a for or range statement
		// stands between it and the nearest enclosing function.
		var stack []ast.Node
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			stack = append(stack, n)
			call, ok := n.(*ast.CallExpr)
			if !ok || !isSelector(call.Fun, timeName, "Sleep") {
				return true
			}
			line := fset.Position(call.Pos()).Line
			if marked[line] || marked[line-1] || inLoop(stack) {
				return true
			}
			out = append(out, BareSleep{Pos: fmt.Sprintf("%s:%d", rel, line), Func: fd.Name.Name, line: line})
			return true
		})
	}
	return out, nil
}

// fileOf is the path of a "path:line" position.
func fileOf(pos string) string { return pos[:strings.LastIndex(pos, ":")] }

// inLoop reports whether the innermost function of stack (the node last) has a loop around it.
func inLoop(stack []ast.Node) bool {
	for i := len(stack) - 2; i >= 0; i-- {
		switch stack[i].(type) {
		case *ast.ForStmt, *ast.RangeStmt:
			return true
		case *ast.FuncLit:
			return false
		}
	}
	return false
}

// importName is the name file f uses for the package at path ("" when f does not import it).
func importName(f *ast.File, path string) string {
	for _, im := range f.Imports {
		if strings.Trim(im.Path.Value, `"`) != path {
			continue
		}
		if im.Name != nil {
			return im.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}

// isSelector reports whether e is pkg.name.
func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

package lint

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

// CheckWiring holds the commands (cmd/...) of the module in dir to wiring: a command reads
// flags and config, builds the library packages' values, connects them, runs them and prints
// what they return. What the system computes (scores, weights, percentiles, budgets, hedge
// replays) lives in the package that owns it, where it is tested alone and every role reuses it.
//
// The rule, "computes in cmd": a command's non-test code does no floating-point arithmetic
// between two values (+ - * / and their op-assign forms on float operands, neither of them a
// constant). Scoring and ranking are float arithmetic between values; wiring only converts
// units for display (100*rate, float64(d)/float64(time.Millisecond)), which has a constant
// operand. Counting and progress use integers. Tests are exempt: they may compute what they
// check.
func CheckWiring(dir string, env ...string) ([]Violation, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir:  dir,
		Env:  append(os.Environ(), env...),
	}
	pkgs, err := packages.Load(cfg, "./cmd/...")
	if err != nil {
		return nil, fmt.Errorf("load ./cmd/... in %s: %w", dir, err)
	}
	var vs []Violation
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("load %s: %v", p.PkgPath, p.Errors[0])
		}
		for _, f := range p.Syntax {
			if strings.HasSuffix(p.Fset.Position(f.Pos()).Filename, "_test.go") {
				continue
			}
			vs = append(vs, floatArithmetic(p.PkgPath, p.Fset, p.TypesInfo, f)...)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].String() < vs[j].String() })
	return vs, nil
}

// floatArithmetic reports the float arithmetic between two non-constant values in f.
func floatArithmetic(pkg string, fset *token.FileSet, info *types.Info, f *ast.File) []Violation {
	isFloat := func(e ast.Expr) bool {
		tv, ok := info.Types[e]
		if !ok {
			return false
		}
		b, ok := tv.Type.Underlying().(*types.Basic)
		return ok && b.Info()&types.IsFloat != 0
	}
	isConst := func(e ast.Expr) bool { return info.Types[e].Value != nil }
	var vs []Violation
	report := func(n ast.Node, what string) {
		p := fset.Position(n.Pos())
		vs = append(vs, Violation{pkg, "computes in cmd", fmt.Sprintf("%s:%d: %s; scores, rates and percentiles belong in the package that owns them",
			filepath.Base(p.Filename), p.Line, what)})
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.BinaryExpr:
			switch x.Op {
			case token.ADD, token.SUB, token.MUL, token.QUO:
				if isFloat(x) && !isConst(x.X) && !isConst(x.Y) {
					report(x, "float "+x.Op.String()+" of two values")
				}
			}
		case *ast.AssignStmt:
			switch x.Tok {
			case token.ADD_ASSIGN, token.SUB_ASSIGN, token.MUL_ASSIGN, token.QUO_ASSIGN:
				if isFloat(x.Lhs[0]) && !isConst(x.Rhs[0]) {
					report(x, "float "+x.Tok.String()+" of a value")
				}
			}
		case *ast.IncDecStmt:
			if isFloat(x.X) {
				report(x, "float "+x.Tok.String())
			}
		}
		return true
	})
	return vs
}

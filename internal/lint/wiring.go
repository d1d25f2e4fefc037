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
//
// The rule "serves gRPC in cmd": a command's non-test code declares no type that implements a
// gRPC service (an XxxServer interface of the module's proto/ packages) or embeds an
// UnimplementedXxxServer. A service's implementation, with its input checks and its errors
// translated to codes, lives in the package that owns what it serves; the command registers it.
//
// The rule "protocol in cmd": a command's non-test code runs no compare-and-set or atomic
// increment on a zen table (the methods CheckAndSet, CheckAndSetMany, CheckAndSetWith,
// Increment and IncrementWith of the module's zen packages, and zen.CheckAndSetMany) and
// loads no Redis Lua script (redis.NewScript): such steps make a protocol between processes
// (a claim, a counter, a lock), which belongs in a package where it is tested alone.
func CheckWiring(dir string, env ...string) ([]Violation, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo |
			packages.NeedImports | packages.NeedModule,
		Dir: dir,
		Env: append(os.Environ(), env...),
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
		module := ""
		if p.Module != nil {
			module = p.Module.Path
		}
		for _, f := range p.Syntax {
			if strings.HasSuffix(p.Fset.Position(f.Pos()).Filename, "_test.go") {
				continue
			}
			vs = append(vs, floatArithmetic(p.PkgPath, p.Fset, p.TypesInfo, f)...)
			vs = append(vs, grpcServices(p, module, f)...)
			vs = append(vs, protocolCalls(p.PkgPath, module, p.Fset, p.TypesInfo, f)...)
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

// grpcServices reports the types declared in f that implement a gRPC service of the module's
// proto/ packages, or embed its Unimplemented server.
func grpcServices(p *packages.Package, module string, f *ast.File) []Violation {
	var servers []*types.TypeName // XxxServer interfaces of the module's proto packages
	for _, imp := range p.Types.Imports() {
		if module == "" || !strings.HasPrefix(imp.Path(), module+"/proto/") {
			continue
		}
		for _, name := range imp.Scope().Names() {
			tn, ok := imp.Scope().Lookup(name).(*types.TypeName)
			if !ok || !strings.HasSuffix(name, "Server") || strings.Contains(name, "_") || strings.HasPrefix(name, "Unimplemented") || strings.HasPrefix(name, "Unsafe") {
				continue
			}
			if types.IsInterface(tn.Type()) {
				servers = append(servers, tn)
			}
		}
	}
	var vs []Violation
	report := func(n ast.Node, what string) {
		pos := p.Fset.Position(n.Pos())
		vs = append(vs, Violation{p.PkgPath, "serves gRPC in cmd", fmt.Sprintf("%s:%d: %s; a service's implementation belongs in the package that owns it, the command registers it",
			filepath.Base(pos.Filename), pos.Line, what)})
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			obj, ok := p.TypesInfo.Defs[ts.Name].(*types.TypeName)
			if !ok {
				continue
			}
			if st, ok := obj.Type().Underlying().(*types.Struct); ok {
				for i := range st.NumFields() {
					if fld := st.Field(i); fld.Embedded() && strings.HasPrefix(fld.Name(), "Unimplemented") && strings.HasSuffix(fld.Name(), "Server") {
						report(ts, fmt.Sprintf("type %s embeds %s", ts.Name.Name, fld.Name()))
					}
				}
			}
			for _, srv := range servers {
				iface := srv.Type().Underlying().(*types.Interface)
				if types.Implements(obj.Type(), iface) || types.Implements(types.NewPointer(obj.Type()), iface) {
					report(ts, fmt.Sprintf("type %s implements %s.%s", ts.Name.Name, srv.Pkg().Name(), srv.Name()))
				}
			}
		}
	}
	return vs
}

// protocolMethods are the atomic steps of zen tables that make protocols between processes.
var protocolMethods = map[string]bool{"CheckAndSet": true, "CheckAndSetMany": true, "CheckAndSetWith": true, "Increment": true, "IncrementWith": true}

// protocolCalls reports compare-and-sets and increments on the module's zen tables, and Redis
// Lua scripts, in f.
func protocolCalls(pkg, module string, fset *token.FileSet, info *types.Info, f *ast.File) []Violation {
	var vs []Violation
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		var id *ast.Ident
		switch fn := call.Fun.(type) {
		case *ast.SelectorExpr:
			id = fn.Sel
		case *ast.Ident:
			id = fn
		default:
			return true
		}
		fobj, ok := info.Uses[id].(*types.Func)
		if !ok || fobj.Pkg() == nil {
			return true
		}
		path := fobj.Pkg().Path()
		inZen := module != "" && (path == module+"/zen" || strings.HasPrefix(path, module+"/zen/"))
		var what string
		switch {
		case inZen && protocolMethods[fobj.Name()]:
			what = fobj.FullName()
		case fobj.Name() == "NewScript" && strings.HasPrefix(path, "github.com/redis/go-redis/"):
			what = "redis.NewScript (a Lua script)"
		default:
			return true
		}
		pos := fset.Position(call.Pos())
		vs = append(vs, Violation{pkg, "protocol in cmd", fmt.Sprintf("%s:%d: %s; a protocol between processes belongs in a package where it is tested alone",
			filepath.Base(pos.Filename), pos.Line, what)})
		return true
	})
	return vs
}

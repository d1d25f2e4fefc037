// Package lint enforces SmartFeed's import rules over a module's package graph, read with
// `go list -e -json ./...`:
//
//   - a service package (worker, generator, feedsvc, graphsvc, engagementsvc, and their subpackages) does not
//     depend on another service, directly or through other packages of the module;
//   - zen (and zen/...) depends on no service and not on pinlater (directly or transitively), and
//     imports nothing of gRPC (google.golang.org/grpc/...);
//   - no package imports cmd/... unless it sits in that same command's tree (cmd/X may use
//     cmd/X/internal/...);
//   - no package is named util, common or shared.
//
// Test imports count too. The rules live in TestImportRules (lint_test.go), which runs them
// over this module; a fixture under testdata/ shows each rule firing.
//
// CheckWiring (wiring.go) adds rules on the code of the commands, not their imports: cmd/...
// holds wiring, not business logic, which it reads as no floating-point arithmetic between two
// values, no gRPC service implementations, and no compare-and-set, atomic increment or Redis Lua
// script, outside tests (TestCommandsAreWiring, fixture testdata/wiringmod).
//
// Oversized and Ratchet (size.go) hold production files to MaxFileLines and functions to
// MaxFuncLines, except the offenders listed in size_allowlist.txt, which may only shrink
// (TestSizeRatchet).
//
// UnmappedPackages (architecture.go) holds ARCHITECTURE.md's directory table to the tree: every
// package directory of the module has a row of its own (TestArchitectureMapsEveryPackage).
package lint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

// Services are the top-level service trees that must not depend on one another.
var Services = []string{"worker", "generator", "feedsvc", "graphsvc", "engagementsvc"}

// BannedNames are package names that say nothing about what the package holds.
var BannedNames = []string{"util", "common", "shared"}

// Package is the part of `go list -json` output the rules read.
type Package struct {
	Dir          string
	ImportPath   string
	Name         string
	Module       *struct{ Path string }
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

// Violation is one broken rule.
type Violation struct {
	Package string // import path of the offending package
	Rule    string
	Detail  string
}

func (v Violation) String() string { return v.Package + ": " + v.Rule + ": " + v.Detail }

// Load runs `go list -e -json ./...` in dir and returns the module path and its packages.
func Load(dir string, env ...string) (string, []Package, error) {
	modCmd := exec.Command("go", "list", "-m")
	modCmd.Dir = dir
	modCmd.Env = append(os.Environ(), env...)
	out, err := modCmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("go list -m in %s: %w", dir, exitDetail(err))
	}
	module := strings.TrimSpace(string(out))

	cmd := exec.Command("go", "list", "-e", "-deps=false", "-json", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err = cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("go list ./... in %s: %w", dir, exitDetail(err))
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p Package
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return "", nil, fmt.Errorf("decoding go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	return module, pkgs, nil
}

func exitDetail(err error) error {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}

// modulePaths is a module's path, for the import paths of its packages.
type modulePaths string

// rel returns path relative to the module, and whether it is in the module.
func (m modulePaths) rel(path string) (string, bool) {
	module := string(m)
	if path == module {
		return ".", true
	}
	if strings.HasPrefix(path, module+"/") {
		return strings.TrimPrefix(path, module+"/"), true
	}
	return "", false
}

// under reports whether the module-relative path r is root or below it.
func under(r, root string) bool { return r == root || strings.HasPrefix(r, root+"/") }

// serviceOf is the service (one of Services) the module-relative path r belongs to, or "".
func serviceOf(r string) string {
	for _, s := range Services {
		if under(r, s) {
			return s
		}
	}
	return ""
}

// commandOf is "cmd/X" for anything under cmd/X/..., "cmd" for cmd itself, and "" outside cmd.
func commandOf(r string) string {
	if !under(r, "cmd") {
		return ""
	}
	parts := strings.SplitN(r, "/", 3)
	if len(parts) == 1 {
		return "cmd"
	}
	return parts[0] + "/" + parts[1]
}

// Check applies every rule to pkgs, the packages of module, and returns the violations sorted.
func Check(module string, pkgs []Package) []Violation {
	rel := modulePaths(module).rel
	var vs []Violation
	seen := map[string]bool{}
	add := func(pkg, rule, detail string) {
		v := Violation{pkg, rule, detail}
		if !seen[v.String()] {
			seen[v.String()] = true
			vs = append(vs, v)
		}
	}

	for _, p := range pkgs {
		me, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		for _, b := range BannedNames {
			last := me[strings.LastIndex(me, "/")+1:]
			if p.Name == b || last == b {
				add(p.ImportPath, "banned package name", fmt.Sprintf("%q says nothing about what the package holds; name it for what it provides", b))
			}
		}

		direct := uniq(p.Imports, p.TestImports, p.XTestImports)
		all := uniq(direct, p.Deps)
		mySvc := serviceOf(me)
		inZen := under(me, "zen")

		for _, imp := range direct {
			if r, ok := rel(imp); ok {
				if c := commandOf(r); c != "" && c != commandOf(me) {
					add(p.ImportPath, "imports cmd", fmt.Sprintf("imports %s; commands are wiring only, move shared code to a library package", imp))
				}
			}
			if inZen && (imp == "google.golang.org/grpc" || strings.HasPrefix(imp, "google.golang.org/grpc/")) {
				add(p.ImportPath, "zen imports grpc", fmt.Sprintf("imports %s; zen is transport-free", imp))
			}
		}
		for _, imp := range all {
			r, ok := rel(imp)
			if !ok {
				continue
			}
			how := "imports"
			if !contains(direct, imp) {
				how = "depends (transitively) on"
			}
			if s := serviceOf(r); s != "" && mySvc != "" && s != mySvc {
				add(p.ImportPath, "service imports service", fmt.Sprintf("%s %s; services talk over RPC or queues, not Go imports", how, imp))
			}
			if inZen && (serviceOf(r) != "" || under(r, "pinlater")) {
				add(p.ImportPath, "zen imports service", fmt.Sprintf("%s %s; zen is below the services and pinlater", how, imp))
			}
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].String() < vs[j].String() })
	return vs
}

func uniq(lists ...[]string) []string {
	m := map[string]bool{}
	var out []string
	for _, l := range lists {
		for _, s := range l {
			if !m[s] {
				m[s] = true
				out = append(out, s)
			}
		}
	}
	sort.Strings(out)
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

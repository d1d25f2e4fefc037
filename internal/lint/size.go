package lint

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// Size limits of production code: a file a reader can hold in mind, a function that does one
// thing. Generated code and test files are exempt; the offenders of the day are listed in
// SizeAllowlist with their size, which may only shrink (TestSizeRatchet).
const (
	MaxFileLines = 600
	MaxFuncLines = 80
)

// SizeAllowlist is the file, relative to the module root, listing the oversized files and
// functions of the tree with their line counts.
const SizeAllowlist = "internal/lint/size_allowlist.txt"

// Oversize is one file or function over its limit: Key is the file's slash path relative to
// the root ("worker/worker.go") or the function's ("worker/worker.go:(*Worker).fanout").
type Oversize struct {
	Key   string
	Lines int
}

// Oversized walks the Go module at root (not nested modules, testdata, third_party or vendor)
// and returns its non-test, non-generated files over maxFile lines and functions over maxFunc
// lines, sorted by Key.
func Oversized(root string, maxFile, maxFunc int) ([]Oversize, error) {
	var out []Oversize
	err := walkModule(root, func(path, rel string, src []byte) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		if ast.IsGenerated(f) {
			return nil
		}
		if n := bytes.Count(src, []byte("\n")); n > maxFile {
			out = append(out, Oversize{rel, n})
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFunc {
				out = append(out, Oversize{rel + ":" + funcName(fd), n})
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, err
}

// funcName is fd's name with its receiver: "Run", "(*Worker).fanout", "(Table).Get".
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = "*", s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	name := "?"
	if id, ok := t.(*ast.Ident); ok {
		name = id.Name
	}
	return "(" + star + name + ")." + fd.Name.Name
}

// walkModule calls fn with each .go file of the Go module at root, its path, its slash path
// relative to root and its source; it skips testdata, third_party, vendor, hidden directories,
// nested modules and the directories go.mod's ignore directives name (as the go command does:
// run/, where the local services create and remove directories while the walk runs).
func walkModule(root string, fn func(path, rel string, src []byte) error) error {
	ignored, err := ignoredDirs(root)
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "third_party" || name == "vendor" || strings.HasPrefix(name, ".") || ignored[path] || fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return fn(path, filepath.ToSlash(rel), src)
	})
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ParseAllowlist reads an allowlist: one "key lines" per line; blank lines and lines starting
// with # are comments.
func ParseAllowlist(data string) (map[string]int, error) {
	out := map[string]int{}
	for i, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var key string
		var n int
		if _, err := fmt.Sscanf(line, "%s %d", &key, &n); err != nil {
			return nil, fmt.Errorf("line %d: %q: want \"key lines\"", i+1, line)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("line %d: %s listed twice", i+1, key)
		}
		out[key] = n
	}
	return out, nil
}

// Ratchet compares the oversized files and functions found with the allowlist: one not listed,
// or grown past its listed size, is a violation; so is a listed one that is no longer over its
// limit (remove it: the list only shrinks).
func Ratchet(found []Oversize, allowed map[string]int) []Violation {
	var vs []Violation
	seen := map[string]bool{}
	for _, o := range found {
		seen[o.Key] = true
		limit, ok := allowed[o.Key]
		switch {
		case !ok:
			vs = append(vs, Violation{o.Key, "too long", fmt.Sprintf("%d lines, over the limit (files %d, functions %d): split it by responsibility",
				o.Lines, MaxFileLines, MaxFuncLines)})
		case o.Lines > limit:
			vs = append(vs, Violation{o.Key, "grew", fmt.Sprintf("%d lines, more than the %d it is allowed in %s: shrink it, do not raise the allowance",
				o.Lines, limit, SizeAllowlist)})
		}
	}
	var stale []string
	for k := range allowed {
		if !seen[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	for _, k := range stale {
		vs = append(vs, Violation{k, "allowance unused", fmt.Sprintf("no longer over the limit (or gone): remove its line from %s", SizeAllowlist)})
	}
	return vs
}

// ignoredDirs returns the directories the ignore directives of root/go.mod name, as paths under
// root; none when root has no go.mod.
func ignoredDirs(root string) (map[string]bool, error) {
	name := filepath.Join(root, "go.mod")
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := modfile.ParseLax(name, b, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, ig := range f.Ignore {
		out[filepath.Join(root, filepath.FromSlash(ig.Path))] = true
	}
	return out, nil
}

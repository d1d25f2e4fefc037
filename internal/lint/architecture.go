package lint

import (
	"path"
	"regexp"
	"slices"
	"strings"
)

// ArchitectureTable is the header line of the directory table in ARCHITECTURE.md that
// UnmappedPackages reads.
const ArchitectureTable = "| path | what lives there | may import |"

var backticked = regexp.MustCompile("`([^`]+)`")

// ArchitecturePaths returns the directories the table under ArchitectureTable in doc names: the
// backticked paths of each row's first cell, without their trailing slash. A path may be a
// pattern of path.Match (`proto/*/v1/`). ok is false when doc has no such table.
func ArchitecturePaths(doc string) (paths []string, ok bool) {
	_, table, ok := strings.Cut(doc, ArchitectureTable)
	if !ok {
		return nil, false
	}
	lines := strings.Split(table, "\n")
	for _, line := range lines[min(2, len(lines)):] { // the rest of the header line, the rule
		if !strings.HasPrefix(line, "|") {
			break
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
		for _, m := range backticked.FindAllStringSubmatch(first, -1) {
			paths = append(paths, strings.TrimSuffix(m[1], "/"))
		}
	}
	return paths, true
}

// UnmappedPackages returns the package directories (slash-separated, relative to the module
// root, "." for the root) that no path of the table names exactly or by pattern. A package is
// mapped only by its own row, never by a parent directory's, so a new package cannot hide
// under the row of the tree it grew in.
func UnmappedPackages(paths, pkgDirs []string) []string {
	var missing []string
	for _, d := range pkgDirs {
		if !slices.ContainsFunc(paths, func(p string) bool {
			ok, err := path.Match(p, d)
			return err == nil && ok
		}) {
			missing = append(missing, d)
		}
	}
	return missing
}

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink finds a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is the anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings (outside code blocks).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	fence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(l, "#") {
			out[slug(strings.TrimSpace(strings.TrimLeft(l, "#")))] = true
		}
	}
	return out
}

// TestDocLinks checks every relative link of README.md and docs/**.md: the file it names
// exists, and the heading its #anchor names is in that file.
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return string(b)
	}
	checked := 0
	for _, f := range files {
		text := read(f)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
			}
			rel, _ := filepath.Rel(root, f)
			st, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s: link %q: no such file", rel, target)
				continue
			}
			checked++
			if anchor != "" && !st.IsDir() && strings.HasSuffix(dest, ".md") && !anchors(read(dest))[anchor] {
				t.Errorf("%s: link %q: no heading with anchor #%s", rel, target, anchor)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("%d links checked: the docs were not read", checked)
	}
}

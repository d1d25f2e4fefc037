package main

import (
	"bytes"
	"os"
	"path/filepath"
)

// hbaseDocsMark opens the HBase section of docs/benchmarks.md: the figures of make bench-hbase
// runs, written by hand from their reports. make bench-docs (a Pebble run) regenerates the page
// above the mark and keeps everything from the mark on.
const hbaseDocsMark = "<!-- HBase section: from make bench-hbase runs; make bench-docs keeps it. -->"

// keptHBaseDocs returns the HBase section of dir's benchmarks.md, from hbaseDocsMark to the end
// and after a blank line, or "" when the page or its section is missing.
func keptHBaseDocs(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		return ""
	}
	i := bytes.Index(b, []byte(hbaseDocsMark))
	if i < 0 {
		return ""
	}
	return "\n" + string(b[i:])
}

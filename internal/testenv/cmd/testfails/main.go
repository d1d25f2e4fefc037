// Command testfails lists the failed tests of `go test -json` output files (gotestsum's
// --jsonfile), one "package TestName" a line, for the summary `make test` prints at its end.
//
// A package that failed with no failed test (a build error, a panic or a timeout) is listed as
// "package (package failed)", followed by the tests it had started and not finished: the ones a
// panic or a timeout stopped. Missing files are skipped, so a step that never ran adds nothing.
// It exits 0 whatever it finds; 2 when a file cannot be read or parsed.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testfails FILE.json...")
		os.Exit(2)
	}
	var evs []event
	for _, name := range os.Args[1:] {
		f, err := os.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "testfails:", err)
			os.Exit(2)
		}
		e, err := read(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testfails: %s: %v\n", name, err)
			os.Exit(2)
		}
		evs = append(evs, e...)
	}
	for _, l := range failures(evs) {
		fmt.Println(l)
	}
}

// event is the part of a test2json event this command reads.
type event struct {
	Action  string
	Package string
	Test    string
}

// read parses a stream of test2json events; lines that are not JSON objects (a build's stray
// output) are ignored.
func read(r io.Reader) ([]event, error) {
	var evs []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			continue
		}
		evs = append(evs, e)
	}
	return evs, sc.Err()
}

// failures returns the lines to print, in the order the failures happened.
func failures(evs []event) []string {
	type key struct{ pkg, test string }
	var out []string
	seen := map[key]bool{}
	failedTest := map[string]bool{} // package → one of its tests failed
	open := map[string][]string{}   // package → tests started and not finished, in start order
	for _, e := range evs {
		switch {
		case e.Test != "" && e.Action == "run":
			open[e.Package] = append(open[e.Package], e.Test)
		case e.Test != "" && (e.Action == "pass" || e.Action == "skip" || e.Action == "fail"):
			open[e.Package] = slices.DeleteFunc(open[e.Package], func(t string) bool { return t == e.Test })
			if e.Action == "fail" && !seen[key{e.Package, e.Test}] {
				seen[key{e.Package, e.Test}] = true
				failedTest[e.Package] = true
				out = append(out, e.Package+" "+e.Test)
			}
		case e.Test == "" && e.Action == "fail" && !failedTest[e.Package] && !seen[key{e.Package, ""}]:
			seen[key{e.Package, ""}] = true
			out = append(out, e.Package+" (package failed)")
			for _, t := range open[e.Package] {
				out = append(out, e.Package+" "+t+" (still running when the package failed)")
			}
		}
	}
	return out
}

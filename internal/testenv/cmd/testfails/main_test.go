package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFailures(t *testing.T) {
	cases := []struct {
		name string
		json string
		want []string
	}{
		{"all pass", `{"Action":"run","Package":"a","Test":"TestA"}
{"Action":"pass","Package":"a","Test":"TestA"}
{"Action":"pass","Package":"a"}`, nil},
		{"failed tests and subtests, in order, once each", `{"Action":"run","Package":"a","Test":"TestA"}
{"Action":"run","Package":"a","Test":"TestA/x"}
{"Action":"output","Package":"a","Test":"TestA/x","Output":"boom\n"}
{"Action":"fail","Package":"a","Test":"TestA/x"}
{"Action":"fail","Package":"a","Test":"TestA"}
{"Action":"run","Package":"b","Test":"TestB"}
{"Action":"fail","Package":"b","Test":"TestB"}
{"Action":"fail","Package":"b","Test":"TestB"}
{"Action":"fail","Package":"a"}
{"Action":"fail","Package":"b"}`, []string{"a TestA/x", "a TestA", "b TestB"}},
		{"a timeout names the tests it stopped", `{"Action":"run","Package":"c","Test":"TestDone"}
{"Action":"pass","Package":"c","Test":"TestDone"}
{"Action":"run","Package":"c","Test":"TestSlow"}
{"Action":"output","Package":"c","Output":"panic: test timed out after 10m0s\n"}
{"Action":"fail","Package":"c"}`, []string{"c (package failed)", "c TestSlow (still running when the package failed)"}},
		{"a build failure and stray lines", `# d
d/x.go:1: syntax error
{"Action":"fail","Package":"d"}
not json {`, []string{"d (package failed)"}},
		{"skips are not failures", `{"Action":"run","Package":"e","Test":"TestE"}
{"Action":"skip","Package":"e","Test":"TestE"}
{"Action":"pass","Package":"e"}`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs, err := read(strings.NewReader(c.json))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, failures(evs)); diff != "" {
				t.Errorf("failures (-want +got):\n%s", diff)
			}
		})
	}
}

package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPhaseHooks: the bench's --trace and --cpuprofile hooks start only in their phase, stop when
// it ends (the later hook first), and a start that fails is reported and not stopped.
func TestPhaseHooks(t *testing.T) {
	var got []string
	hook := func(what string, err error) func(string) func() {
		return onlyPhase("serving", what, io.Discard, func() error {
			got = append(got, "start "+what)
			return err
		}, func() { got = append(got, "stop "+what) })
	}
	phase := thenPhase(thenPhase(nil, hook("trace", nil)), hook("cpu", nil))
	for _, name := range []string{"fanout", "serving", "hedging"} {
		phase(name)()
	}
	if diff := cmp.Diff([]string{"start trace", "start cpu", "stop cpu", "stop trace"}, got); diff != "" {
		t.Errorf("hooks (-want +got):\n%s", diff)
	}

	got = nil
	var out strings.Builder
	failing := onlyPhase("serving", "trace", &out, func() error { return errors.New("busy") }, func() { got = append(got, "stop") })
	failing("serving")()
	if len(got) != 0 || !strings.Contains(out.String(), "trace of serving: busy") {
		t.Errorf("a failed start: stops %v, output %q; want no stop and the error reported", got, out.String())
	}
}

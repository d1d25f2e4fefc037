package main

import (
	"bytes"
	"context"
	"sort"
	"testing"
	"time"
)

// TestHelpExitsZero: --help on every command, and on the subcommands of jobs, id and hedge,
// prints something and succeeds, without touching Redis or a store.
func TestHelpExitsZero(t *testing.T) {
	var names []string
	for n := range commands() {
		names = append(names, n)
	}
	sort.Strings(names)
	cases := [][]string{}
	for _, n := range names {
		cases = append(cases, []string{n, "--help"})
	}
	cases = append(cases, []string{"jobs", "queues", "--help"}, []string{"jobs", "dead", "--help"},
		[]string{"id", "decode", "--help"}, []string{"id", "encode", "--help"}, []string{"hedge", "set", "--help"})
	for _, args := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var out bytes.Buffer
		err := run(ctx, args, &out, &out)
		cancel()
		if err != nil {
			t.Errorf("smartfeed %v: %v", args, err)
		} else if out.Len() == 0 {
			t.Errorf("smartfeed %v: printed nothing", args)
		}
	}
}

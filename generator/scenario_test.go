package generator

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/smartfeed/smartfeed/zen"
)

var update = flag.Bool("update", false, "alias of datadriven's -rewrite")

// Scenario files (testdata/scenarios/*.txt) are in datadriven's format: each command is a
// directive with its arguments (config takes its JSON as input, on the next line), followed by
// "----" and its expected output. Commands:
//
//	config                             put the config on the next line in force (ParseConfig: defaults + overrides)
//	pool <source> <pin> <score> [author=N] [board=N] [age=DUR] [reason=WORD]
//	                                   insert a pool entry (author and board default to the pin; age to 1h)
//	advance <DUR>                      move the clock
//	generate [max=N]                   GenerateChunk with debug; prints the chunk and the explanations
//	settle delivered|failed            settle the last chunk
//	pending                            list unsettled chunks
//	pools                              print what is left in the pools
//	drops                              print the counted drops
//
// IDs print as p<n> (pin), a<n> (author), b<n> (board) and u (the user).
//
// Each scenario runs on every backend. `go test -run TestScenarios -rewrite` (or -update)
// rewrites the expected output from the first; the others must agree with what it wrote.
func TestScenarios(t *testing.T) {
	if *update {
		if err := flag.Set("rewrite", "true"); err != nil {
			t.Fatal(err)
		}
	}
	rewrite := flag.Lookup("rewrite").Value.String() == "true"
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		for i, b := range backends {
			t.Run(b.name, func(t *testing.T) {
				if rewrite && i > 0 {
					// The other backends must agree with the rewritten output.
					setRewrite(t, "false")
					defer setRewrite(t, "true")
				}
				sc := newScenario(newEnv(t, b.make, nil))
				datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
					return sc.do(t, d)
				})
			})
		}
	})
}

func setRewrite(t *testing.T, v string) {
	t.Helper()
	if err := flag.Set("rewrite", v); err != nil {
		t.Fatal(err)
	}
}

// scenario is the state of one scenario file on one backend.
type scenario struct {
	e     *env
	names map[string]string // decimal ID → its printed name
	last  Chunk
}

func newScenario(e *env) *scenario {
	return &scenario{e: e, names: map[string]string{strconv.FormatUint(uint64(e.user), 10): "u"}}
}

func (sc *scenario) name(id zen.ID, prefix string, n uint64) {
	sc.names[strconv.FormatUint(uint64(id), 10)] = prefix + strconv.FormatUint(n, 10)
}

// do runs one command and returns its output, with IDs replaced by their names.
func (sc *scenario) do(t *testing.T, d *datadriven.TestData) string {
	ctx := context.Background()
	e := sc.e
	var out strings.Builder
	fail := func(format string, a ...any) {
		t.Helper()
		d.Fatalf(t, format, a...)
	}
	args := make([]string, len(d.CmdArgs))
	for i, a := range d.CmdArgs {
		args[i] = a.String()
	}
	switch d.Cmd {
	case "config":
		c, err := ParseConfig([]byte(d.Input))
		if err != nil {
			fail("%v", err)
		}
		if err := e.gen.SetConfig(c); err != nil {
			fail("%v", err)
		}
	case "pool":
		if len(args) < 3 {
			fail("want: pool <source> <pin> <score> [k=v...]")
		}
		src, err := zen.ParseSource(args[0])
		if err != nil {
			fail("%v", err)
		}
		pin, err1 := strconv.ParseUint(args[1], 10, 64)
		score, err2 := strconv.ParseFloat(args[2], 64)
		if err1 != nil || err2 != nil {
			fail("bad pin or score")
		}
		author, board, age, reason := pin, pin, time.Hour, ""
		for _, kv := range args[3:] {
			k, v, _ := strings.Cut(kv, "=")
			var err error
			switch k {
			case "author":
				author, err = strconv.ParseUint(v, 10, 64)
			case "board":
				board, err = strconv.ParseUint(v, 10, 64)
			case "age":
				age, err = time.ParseDuration(v)
			case "reason":
				reason = v
			default:
				fail("unknown key %q", k)
			}
			if err != nil {
				fail("%s: %v", k, err)
			}
		}
		en := e.entry(t, src, pin, score, author, board, age)
		en.Reason = reason
		sc.name(en.Pin, "p", pin)
		sc.name(en.Author, "a", author)
		sc.name(en.Board, "b", board)
		e.insert(t, en)
	case "advance":
		dur, err := time.ParseDuration(strings.Join(args, " "))
		if err != nil {
			fail("%v", err)
		}
		e.clk.Advance(dur)
	case "generate":
		opts := Options{Debug: true}
		for _, kv := range args {
			k, v, _ := strings.Cut(kv, "=")
			if k != "max" {
				fail("unknown key %q", k)
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				fail("%v", err)
			}
			opts.Max = n
		}
		c, err := e.gen.GenerateChunk(ctx, e.user, opts)
		if err != nil {
			fail("%v", err)
		}
		e.gen.Wait() // the expiry sweep it started, if one was due
		sc.last = c
		fmt.Fprintf(&out, "chunk %s: %d pins\n", c.ID, len(c.Items))
		for i, it := range c.Items {
			fmt.Fprintf(&out, "  %2d. %s %s %.4g %s %s: %s\n", i+1, it.Pin, it.Source.String(), it.Score, it.Author, it.Board, it.Reason)
		}
		for _, dbg := range c.Debug {
			if !strings.HasPrefix(dbg, "pick ") {
				fmt.Fprintf(&out, "  | %s\n", dbg)
			}
		}
	case "settle":
		if len(args) != 1 || (args[0] != "delivered" && args[0] != "failed") {
			fail("want: settle delivered|failed")
		}
		if err := e.gen.Settle(ctx, e.user, sc.last.ID, args[0] == "delivered"); err != nil {
			fail("%v", err)
		}
		st, _, err := e.gen.loadState(ctx, e.user)
		if err != nil {
			fail("%v", err)
		}
		fmt.Fprintf(&out, "settled %s; owed %d\n", sc.last.ID, st.Owed)
	case "pending":
		cs, err := e.gen.Pending(ctx, e.user)
		if err != nil {
			fail("%v", err)
		}
		for _, c := range cs {
			fmt.Fprintf(&out, "chunk %s: %d pins\n", c.ID, len(c.Items))
		}
	case "pools":
		for _, en := range e.pools.all(e.user) {
			fmt.Fprintf(&out, "  %s %s %.4g\n", en.Source.String(), en.Pin, en.Score)
		}
	case "drops":
		n, err := e.gen.Drops(ctx, e.user)
		if err != nil {
			fail("%v", err)
		}
		fmt.Fprintf(&out, "drops %d\n", n)
	default:
		fail("unknown command")
	}
	pairs := make([]string, 0, 2*len(sc.names))
	for k, v := range sc.names {
		pairs = append(pairs, k, v)
	}
	return strings.NewReplacer(pairs...).Replace(out.String())
}

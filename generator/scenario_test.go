package generator

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

var update = flag.Bool("update", false, "rewrite the expected output of testdata/scenarios/*.txt")

// Scenario files (testdata/scenarios/*.txt) hold commands, a line "----", and the expected
// output. Commands:
//
//	config <json>                      put a config in force (ParseConfig: defaults + overrides)
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
const sep = "----"

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, want, ok := strings.Cut(string(data), sep+"\n")
			if !ok {
				t.Fatalf("%s: no %q line", file, sep)
			}
			for i, b := range backends {
				t.Run(b.name, func(t *testing.T) {
					got := runScenario(t, newEnv(t, b.make, nil), input)
					if *update && i == 0 {
						if err := os.WriteFile(file, []byte(input+sep+"\n"+got), 0o644); err != nil {
							t.Fatal(err)
						}
						want = got // the other backends must agree with the rewritten output
					}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("%s (-want +got):\n%s", file, diff)
					}
				})
			}
		})
	}
}

func runScenario(t *testing.T, e *env, input string) string {
	ctx := context.Background()
	var out strings.Builder
	names := map[string]string{strconv.FormatUint(uint64(e.user), 10): "u"}
	name := func(id zen.ID, prefix string, n uint64) {
		names[strconv.FormatUint(uint64(id), 10)] = prefix + strconv.FormatUint(n, 10)
	}
	var last Chunk
	for ln, line := range strings.Split(input, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fail := func(format string, a ...any) {
			t.Helper()
			t.Fatalf("line %d %q: %s", ln+1, line, fmt.Sprintf(format, a...))
		}
		cmd, rest, _ := strings.Cut(line, " ")
		args := strings.Fields(rest)
		switch cmd {
		case "config":
			c, err := ParseConfig([]byte(rest))
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
			name(en.Pin, "p", pin)
			name(en.Author, "a", author)
			name(en.Board, "b", board)
			e.insert(t, en)
		case "advance":
			d, err := time.ParseDuration(rest)
			if err != nil {
				fail("%v", err)
			}
			e.clk.Advance(d)
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
			last = c
			fmt.Fprintf(&out, "> %s\n", line)
			fmt.Fprintf(&out, "chunk %s: %d pins\n", c.ID, len(c.Items))
			for i, it := range c.Items {
				fmt.Fprintf(&out, "  %2d. %s %s %.4g %s %s: %s\n", i+1, it.Pin, it.Source.String(), it.Score, it.Author, it.Board, it.Reason)
			}
			for _, d := range c.Debug {
				if !strings.HasPrefix(d, "pick ") {
					fmt.Fprintf(&out, "  | %s\n", d)
				}
			}
		case "settle":
			if len(args) != 1 || (args[0] != "delivered" && args[0] != "failed") {
				fail("want: settle delivered|failed")
			}
			if err := e.gen.Settle(ctx, e.user, last.ID, args[0] == "delivered"); err != nil {
				fail("%v", err)
			}
			st, _, err := e.gen.loadState(ctx, e.user)
			if err != nil {
				fail("%v", err)
			}
			fmt.Fprintf(&out, "> %s\nsettled %s; owed %d\n", line, last.ID, st.Owed)
		case "pending":
			cs, err := e.gen.Pending(ctx, e.user)
			if err != nil {
				fail("%v", err)
			}
			fmt.Fprintf(&out, "> %s\n", line)
			for _, c := range cs {
				fmt.Fprintf(&out, "chunk %s: %d pins\n", c.ID, len(c.Items))
			}
		case "pools":
			fmt.Fprintf(&out, "> %s\n", line)
			for _, en := range e.pools.all(e.user) {
				fmt.Fprintf(&out, "  %s %s %.4g\n", en.Source.String(), en.Pin, en.Score)
			}
		case "drops":
			n, err := e.gen.Drops(ctx, e.user)
			if err != nil {
				fail("%v", err)
			}
			fmt.Fprintf(&out, "> %s\ndrops %d\n", line, n)
		default:
			fail("unknown command")
		}
	}
	pairs := make([]string, 0, 2*len(names))
	for k, v := range names {
		pairs = append(pairs, k, v)
	}
	return strings.NewReplacer(pairs...).Replace(out.String())
}

package feedsvc

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
)

var update = flag.Bool("update", false, "rewrite the .golden files of testdata/scenarios")

// TestScenarios runs each testdata/scenarios/*.txt script against a fresh service and compares
// the transcript with the .golden file beside it (go test -run Scenarios -update rewrites them).
//
// Commands, one per line (# starts a comment):
//
//	get <size>                  first page
//	next <size>                 the page after the cursor of the last get or next
//	other <size>                a first page on another device (keeps the cursor)
//	materialize                 run the queued materialize jobs
//	generator ok|error|stuck    how the generator answers
//	primary ok|down|slow        fault mix of the primary store (slow: every read 2s)
//	standby ok|down
//	flush                       wait for replication
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			script, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got := runScenario(t, string(script))
			golden := strings.TrimSuffix(file, ".txt") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("transcript (-want +got):\n%s", diff)
			}
		})
	}
}

func runScenario(t *testing.T, script string) string {
	e := newEnv(t, func(c *Config, p *hedge.Policy) {
		c.GeneratorDeadline = 30 * time.Millisecond
		p.Mode, p.Delay = hedge.ModeFixed, 5*time.Millisecond
	})
	var out strings.Builder
	cursor := ""
	for n, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			fmt.Fprintln(&out, line)
			continue
		}
		fmt.Fprintf(&out, "> %s\n", line)
		f := strings.Fields(line)
		arg := ""
		if len(f) > 1 {
			arg = f[1]
		}
		fail := func(format string, a ...any) { t.Fatalf("line %d: %q: "+format, append([]any{n + 1, line}, a...)...) }
		switch f[0] {
		case "get", "next", "other":
			size, err := strconv.Atoi(arg)
			if err != nil {
				fail("size: %v", err)
			}
			req := Request{User: e.user, PageSize: size}
			if f[0] == "next" {
				req.Cursor = cursor
			}
			p, err := e.svc.GetFeed(t.Context(), req)
			if err != nil {
				fmt.Fprintf(&out, "error: %v\n", err)
				continue
			}
			if f[0] != "other" {
				cursor = p.NextCursor
			}
			var items []string
			for _, it := range p.Items {
				s := strconv.FormatUint(it.Pin.Local(), 10)
				if it.Fresh {
					s += "*"
				}
				items = append(items, s)
			}
			end := "more"
			if p.NextCursor == "" {
				end = "end"
			}
			fmt.Fprintf(&out, "[%s] fresh=%s from=%v hedged=%v %s\n", strings.Join(items, " "), p.FreshStatus, p.From, p.Hedged, end)
		case "materialize":
			e.svc.Wait()
			e.materialize(t)
		case "generator":
			e.gen.mu.Lock()
			switch arg {
			case "ok":
				e.gen.err = nil
				if e.gen.block != nil {
					close(e.gen.block)
					e.gen.block = nil
				}
			case "error":
				e.gen.err = errGen
			case "stuck":
				e.gen.block = make(chan struct{})
			default:
				fail("unknown generator state")
			}
			e.gen.mu.Unlock()
		case "primary", "standby":
			tb := e.primary
			if f[0] == "standby" {
				tb = e.standby
			}
			c := map[string]faults.Config{"ok": {}, "down": {Outage: true}, "slow": {SlowFraction: 1, Slow: 2 * time.Second}}
			cfg, ok := c[arg]
			if !ok {
				fail("unknown store state")
			}
			if err := tb.Set(cfg); err != nil {
				fail("%v", err)
			}
		case "flush":
			e.flush(t)
		default:
			fail("unknown command")
		}
	}
	e.gen.mu.Lock()
	if e.gen.block != nil {
		close(e.gen.block)
		e.gen.block = nil
	}
	e.gen.mu.Unlock()
	return out.String()
}

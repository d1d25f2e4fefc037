package feedsvc

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
)

var update = flag.Bool("update", false, "alias of datadriven's -rewrite")

// TestScenarios runs each testdata/scenarios/*.txt script against a fresh service, in
// datadriven's format: each command is a directive with its argument, followed by "----" and
// its expected output (go test -run Scenarios -rewrite, or -update, rewrites them).
//
// Commands (# starts a comment line):
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
	if *update {
		if err := flag.Set("rewrite", "true"); err != nil {
			t.Fatal(err)
		}
	}
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		sc := newScenario(t)
		defer sc.unblock()
		datadriven.RunTest(t, path, sc.do)
	})
}

// scenario is the state of one scenario file: the service and the cursor of the last page.
type scenario struct {
	e      *env
	cursor string
}

func newScenario(t *testing.T) *scenario {
	e := newEnv(t, func(c *Config, p *hedge.Policy) {
		c.GeneratorDeadline = 30 * time.Millisecond
		// Hedge only when a script slows a store (2 s a read): a 5 ms cutoff also hedged
		// ordinary reads that a loaded CI machine delayed, and the script saw the standby.
		p.Mode, p.Delay = hedge.ModeFixed, 200*time.Millisecond
	})
	return &scenario{e: e}
}

// unblock releases a generator left stuck by the script.
func (sc *scenario) unblock() {
	e := sc.e
	e.gen.mu.Lock()
	if e.gen.block != nil {
		close(e.gen.block)
		e.gen.block = nil
	}
	e.gen.mu.Unlock()
}

// do runs one command and returns its output.
func (sc *scenario) do(t *testing.T, d *datadriven.TestData) string {
	e := sc.e
	var out strings.Builder
	f := []string{d.Cmd}
	for _, a := range d.CmdArgs {
		f = append(f, a.String())
	}
	arg := ""
	if len(f) > 1 {
		arg = f[1]
	}
	fail := func(format string, a ...any) {
		t.Helper()
		d.Fatalf(t, format, a...)
	}
	switch f[0] {
	case "get", "next", "other":
		size, err := strconv.Atoi(arg)
		if err != nil {
			fail("size: %v", err)
		}
		req := Request{User: e.user, PageSize: size}
		if f[0] == "next" {
			req.Cursor = sc.cursor
		}
		p, err := e.svc.GetFeed(t.Context(), req)
		if err != nil {
			fmt.Fprintf(&out, "error: %v\n", err)
			return out.String()
		}
		if f[0] != "other" {
			sc.cursor = p.NextCursor
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
	return out.String()
}

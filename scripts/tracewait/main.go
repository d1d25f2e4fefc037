// Command tracewait reads a Go execution trace (runtime/trace, or `smartfeed bench --trace FILE
// --cpuprofile-phase serving`) and says where goroutines waited: for each kind of goroutine (by
// the function it started in) how long it ran, how long it was runnable but not running (waiting
// for a processor), and what it blocked on. With -who FUNC it also says, for each wait of a
// FUNC goroutine for a processor longer than -over, which goroutines ran meanwhile.
//
//	go run ./scripts/tracewait -match transport,GetFeed TRACE
//	go run ./scripts/tracewait -who 'google.golang.org/grpc/internal/transport.NewServerTransport.func3' TRACE
//	go run ./scripts/tracewait -match grpc,feedsvc -who 'github.com/smartfeed/smartfeed/bench.pacedAt.func1' -window 2 TRACE
//
// docs/read-path.md, "Background work waits its turn", is what it was written for.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

// span is one stretch of a goroutine in one state.
type span struct {
	state      string // running, runnable, waiting, syscall
	why        string // for waits: the reason and the two innermost frames outside the runtime
	start, end trace.Time
}

// gor is what the trace says of one goroutine.
type gor struct {
	start       string // the outermost frame seen: the function it started in
	spans       []span
	cur         *span
	born, ended trace.Time // 0 when the trace did not see it begin or end
}

func main() {
	match := flag.String("match", "transport,grpc", "comma-separated substrings: report goroutines whose start function holds one")
	who := flag.String("who", "", "a start function: for its waits for a processor, which goroutines ran meanwhile")
	over := flag.Float64("over", 0.5, "with -who: waits longer than this many ms")
	slow := flag.Float64("slow", 0, "with -who: list the FUNC goroutines that lived longer than this many ms, state by state")
	window := flag.Float64("window", 0, "with -who: for the 4 slowest FUNC goroutines that lived longer than this many ms, every state of the "+
		"-match goroutines during their lives, and the CPU each kind of goroutine used then")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tracewait [-match S,S] [-who FUNC [-over MS] [-slow MS] [-window MS]] TRACE")
		os.Exit(2)
	}
	gs, err := read(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracewait:", err)
		os.Exit(1)
	}
	summary(gs, strings.Split(*match, ","))
	if *who != "" {
		meanwhile(gs, *who, *over)
		if *slow > 0 {
			slowOnes(gs, *who, *slow)
		}
		if *window > 0 {
			windows(gs, *who, strings.Split(*match, ","), *window)
		}
	}
}

// frames are the function names of st, innermost first.
func frames(st trace.Stack) []string {
	var out []string
	for f := range st.Frames() {
		out = append(out, f.Func)
	}
	return out
}

// where is the reason and the two innermost frames that are not the runtime's or sync's.
func where(reason string, st trace.Stack) string {
	var fs []string
	for _, f := range frames(st) {
		if !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "internal/") && !strings.HasPrefix(f, "sync.") && !strings.HasPrefix(f, "time.") {
			fs = append(fs, f)
		}
		if len(fs) == 2 {
			break
		}
	}
	return reason + ": " + strings.Join(fs, " < ")
}

func read(path string) (map[trace.GoID]*gor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return nil, err
	}
	gs := map[trace.GoID]*gor{}
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			return gs, nil
		}
		if err != nil {
			return nil, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		g := gs[id]
		if g == nil {
			g = &gor{}
			gs[id] = g
		}
		if fs := frames(st.Stack); g.start == "" && len(fs) > 0 {
			g.start = fs[len(fs)-1]
		}
		t := ev.Time()
		from, to := st.Goroutine()
		if from == trace.GoNotExist {
			g.born = t
		}
		if to == trace.GoNotExist && g.born != 0 {
			g.ended = t
		}
		if g.cur != nil {
			g.cur.end = t
			g.spans = append(g.spans, *g.cur)
			g.cur = nil
		}
		switch to {
		case trace.GoRunning:
			g.cur = &span{state: "running", start: t}
		case trace.GoRunnable:
			g.cur = &span{state: "runnable", start: t}
		case trace.GoWaiting:
			g.cur = &span{state: "waiting", why: where(st.Reason, st.Stack), start: t}
		case trace.GoSyscall:
			g.cur = &span{state: "syscall", why: where("syscall", st.Stack), start: t}
		}
	}
}

func ms(a, b trace.Time) float64 { return float64(b-a) / 1e6 }

func pct(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return v[int(q*float64(len(v)-1))]
}

// summary prints, per start function matching one of match, the goroutines' running and
// runnable time and their waits by reason.
func summary(gs map[trace.GoID]*gor, match []string) {
	type kind struct {
		n        int
		lives    []float64
		run      float64
		runnable []float64
		waits    map[string][]float64
	}
	kinds := map[string]*kind{}
	for _, g := range gs {
		if !slices.ContainsFunc(match, func(m string) bool { return m != "" && strings.Contains(g.start, m) }) {
			continue
		}
		k := kinds[g.start]
		if k == nil {
			k = &kind{waits: map[string][]float64{}}
			kinds[g.start] = k
		}
		k.n++
		if g.ended != 0 {
			k.lives = append(k.lives, ms(g.born, g.ended))
		}
		for _, s := range g.spans {
			d := ms(s.start, s.end)
			switch s.state {
			case "running":
				k.run += d
			case "runnable":
				k.runnable = append(k.runnable, d)
			default:
				k.waits[s.why] = append(k.waits[s.why], d)
			}
		}
	}
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		k := kinds[n]
		sort.Float64s(k.runnable)
		var rsum float64
		for _, d := range k.runnable {
			rsum += d
		}
		fmt.Printf("%s: %d goroutines, ran %.1f ms, runnable %.1f ms in %d waits (p50 %.3f, p90 %.3f, p99 %.3f ms)\n",
			n, k.n, k.run, rsum, len(k.runnable), pct(k.runnable, .5), pct(k.runnable, .9), pct(k.runnable, .99))
		if len(k.lives) > 0 {
			sort.Float64s(k.lives)
			fmt.Printf("    %d begun and ended in the trace, lived p50 %.3f p90 %.3f p99 %.3f ms\n",
				len(k.lives), pct(k.lives, .5), pct(k.lives, .9), pct(k.lives, .99))
		}
		var whys []string
		for w := range k.waits {
			whys = append(whys, w)
		}
		sort.Slice(whys, func(i, j int) bool { return len(k.waits[whys[i]]) > len(k.waits[whys[j]]) })
		for i, w := range whys {
			if i == 5 {
				break
			}
			v := k.waits[w]
			sort.Float64s(v)
			fmt.Printf("    %7d waits, p50 %.3f p90 %.3f ms: %s\n", len(v), pct(v, .5), pct(v, .9), w)
		}
	}
}

// meanwhile prints, over every wait for a processor longer than overMs of a goroutine that
// started in who, how long goroutines of each start function ran during it.
func meanwhile(gs map[trace.GoID]*gor, who string, overMs float64) {
	type run struct {
		start string
		a, b  trace.Time
	}
	var runs []run
	var waits []span
	for _, g := range gs {
		for _, s := range g.spans {
			if s.state == "running" {
				runs = append(runs, run{g.start, s.start, s.end})
			}
			if g.start == who && s.state == "runnable" && ms(s.start, s.end) > overMs {
				waits = append(waits, s)
			}
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].a < runs[j].a })
	ran := map[string]float64{}
	for _, w := range waits {
		// Go preempts a goroutine after 10 ms: a run that overlaps w started at most that
		// long before it (a margin for the trace's own delays).
		from := sort.Search(len(runs), func(i int) bool { return runs[i].a >= w.start-trace.Time(50e6) })
		for _, r := range runs[from:] {
			if r.a >= w.end {
				break
			}
			a, b := max(r.a, w.start), min(r.b, w.end)
			if b > a {
				ran[r.start] += ms(a, b)
			}
		}
	}
	fmt.Printf("\n%s waited for a processor longer than %.2f ms %d times; meanwhile ran (ms):\n", who, overMs, len(waits))
	var names []string
	for n := range ran {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return ran[names[i]] > ran[names[j]] })
	for i, n := range names {
		if i == 15 {
			break
		}
		fmt.Printf("    %8.1f  %s\n", ran[n], n)
	}
}

// slowOnes prints, for the goroutines that started in who and lived longer than overMs (the
// slowest 20), where their life went: running, runnable, and each wait by reason.
func slowOnes(gs map[trace.GoID]*gor, who string, overMs float64) {
	var slow []*gor
	var n int
	for _, g := range gs {
		if g.start != who || g.ended == 0 {
			continue
		}
		n++
		if ms(g.born, g.ended) > overMs {
			slow = append(slow, g)
		}
	}
	sort.Slice(slow, func(i, j int) bool { return ms(slow[i].born, slow[i].ended) > ms(slow[j].born, slow[j].ended) })
	fmt.Printf("\n%d of %d %s goroutines lived longer than %.2f ms:\n", len(slow), n, who, overMs)
	total := map[string]float64{}
	for i, g := range slow {
		by := map[string]float64{}
		for _, s := range g.spans {
			k := s.state
			if s.why != "" {
				k = s.why
			}
			by[k] += ms(s.start, s.end)
			total[k] += ms(s.start, s.end)
		}
		if i >= 20 {
			continue
		}
		var ks []string
		for k := range by {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(a, b int) bool { return by[ks[a]] > by[ks[b]] })
		fmt.Printf("  %.3f ms at %.3f s:", ms(g.born, g.ended), float64(g.born)/1e9)
		for j, k := range ks {
			if j == 4 {
				break
			}
			fmt.Printf("  %s %.3f;", k, by[k])
		}
		fmt.Println()
	}
	var ks []string
	for k := range total {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(a, b int) bool { return total[ks[a]] > total[ks[b]] })
	fmt.Println("  in all:")
	for j, k := range ks {
		if j == 10 {
			break
		}
		fmt.Printf("    %8.2f ms  %s\n", total[k], k)
	}
}

// windows prints, for the 4 slowest goroutines that started in who and lived longer than overMs,
// a timeline of the goroutines matching match (and the slow one) during its life, every running
// stretch and every other state longer than 50 µs, then how much CPU each kind of goroutine used
// in that window: whether the processors were busy (with what) or idle while the call waited.
func windows(gs map[trace.GoID]*gor, who string, match []string, overMs float64) {
	var slow []*gor
	for _, g := range gs {
		if g.start == who && g.ended != 0 && ms(g.born, g.ended) > overMs {
			slow = append(slow, g)
		}
	}
	sort.Slice(slow, func(i, j int) bool { return ms(slow[i].born, slow[i].ended) > ms(slow[j].born, slow[j].ended) })
	for i, c := range slow {
		if i == 4 {
			break
		}
		a, b := c.born, c.ended
		fmt.Printf("\n%s lived %.3f ms from %.3f s (ms from its start, how long, goroutine, state):\n", who, ms(a, b), float64(a)/1e9)
		type line struct {
			t    trace.Time
			text string
		}
		var lines []line
		running := map[string]float64{}
		var total float64
		for id, g := range gs {
			shown := g == c || slices.ContainsFunc(match, func(m string) bool { return m != "" && strings.Contains(g.start, m) })
			for _, s := range g.spans {
				if s.end < a || s.start > b {
					continue
				}
				if s.state == "running" {
					d := ms(max(s.start, a), min(s.end, b))
					running[g.start] += d
					total += d
				}
				if shown && s.start >= a && (s.state == "running" || ms(s.start, s.end) > 0.05) {
					lines = append(lines, line{s.start, fmt.Sprintf("  %8.3f %8.3f  g%-8d %-9s %s %s", ms(a, s.start), ms(s.start, s.end), id, s.state, g.start, s.why)})
				}
			}
		}
		sort.Slice(lines, func(i, j int) bool { return lines[i].t < lines[j].t })
		for _, l := range lines {
			fmt.Println(l.text)
		}
		fmt.Printf("  CPU used by every goroutine in the %.3f ms window: %.3f ms (GOMAXPROCS processors could give it %.3f ms each); by kind:\n", ms(a, b), total, ms(a, b))
		var ns []string
		for n := range running {
			ns = append(ns, n)
		}
		sort.Slice(ns, func(i, j int) bool { return running[ns[i]] > running[ns[j]] })
		for j, n := range ns {
			if j == 8 {
				break
			}
			fmt.Printf("    %8.3f  %s\n", running[n], n)
		}
	}
}

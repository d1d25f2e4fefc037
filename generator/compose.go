package generator

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/smartfeed/smartfeed/zen"
)

// This file holds the pure part of composition: how many pins, how many from each source,
// which ones, and in what order. It touches no storage.

// wantedSize returns the chunk size before availability: clamp(base + perHour × hours away,
// min, max) (a first visit asks for max), capped by the caller's max, raised to what is owed
// after an undelivered chunk (still within the caller's max). The note explains the figure.
func wantedSize(c *Config, lastVisitMs, nowMs int64, owed, callerMax int) (int, string) {
	var n int
	var note string
	if lastVisitMs <= 0 {
		n = c.MaxChunk
		note = fmt.Sprintf("first visit: max_chunk %d", n)
	} else {
		hours := float64(nowMs-lastVisitMs) / 3.6e6
		if hours < 0 {
			hours = 0
		}
		raw := float64(c.BaseChunk) + c.PerHour*hours
		if raw > HardMaxChunk {
			raw = HardMaxChunk
		}
		n = int(math.Round(raw))
		note = fmt.Sprintf("base %d + %g/h × %.2fh = %d", c.BaseChunk, c.PerHour, hours, n)
		n = max(c.MinChunk, min(n, c.MaxChunk))
		note += fmt.Sprintf(", clamped to [%d, %d] = %d", c.MinChunk, c.MaxChunk, n)
	}
	if owed > n {
		n = owed
		note += fmt.Sprintf(", raised to owed %d", owed)
	}
	if callerMax > 0 && n > callerMax {
		n = callerMax
		note += fmt.Sprintf(", capped by request max %d", callerMax)
	}
	return n, note
}

// allocate distributes slots among sources in proportion to their rates by the Sainte-Laguë
// method, never giving a source more than avail[i]. alloc starts at start[i] (slots already
// filled) and grows until the total reaches n or no source has supply left. A source short
// of supply simply stops receiving slots, so its share flows to the others in proportion to
// their rates; a zero-rate source receives slots only when every rated source is exhausted.
func allocate(plan []sourcePlan, avail, start []int, n int) []int {
	alloc := make([]int, len(plan))
	total := 0
	for i := range plan {
		if start != nil {
			alloc[i] = start[i]
		}
		total += alloc[i]
	}
	for total < n {
		best, bestPri := -1, -1.0
		for i, p := range plan {
			if alloc[i] >= avail[i] {
				continue
			}
			pri := p.rate / float64(2*alloc[i]+1)
			if pri > bestPri {
				best, bestPri = i, pri
			}
		}
		if best < 0 {
			break
		}
		alloc[best]++
		total++
	}
	return alloc
}

// pick is a pool entry chosen for a chunk, with the reason it was chosen.
type pick struct {
	e      zen.PoolEntry
	reason string
	weak   bool
}

// selection is the outcome of choosing pins for one round.
type selection struct {
	picks    []pick
	deferred []zen.PoolEntry // weak candidates left in the pools
	notes    []string
}

// choose selects pins from per-source candidate lists (best-first, already filtered of
// excluded and expired pins) so that, with the won picks already held (per source in
// wonBy), the chunk reaches n: strong pins at the configured rates, shortfalls filled from the
// other sources, and weak pins (score under the source's threshold) only to top the chunk up
// to minChunk; the weak pins not used are deferred.
func choose(plan []sourcePlan, lists [][]zen.PoolEntry, wonBy []int, n, minChunk int) selection {
	var sel selection
	strong := make([][]zen.PoolEntry, len(plan))
	weak := make([][]zen.PoolEntry, len(plan))
	for i, p := range plan {
		for _, e := range lists[i] {
			if e.Score < p.threshold {
				weak[i] = append(weak[i], e)
			} else {
				strong[i] = append(strong[i], e)
			}
		}
	}
	full := make([]int, len(plan))
	avail := make([]int, len(plan))
	won := 0
	for i := range plan {
		full[i] = n
		avail[i] = wonBy[i] + len(strong[i])
		won += wonBy[i]
	}
	quota := allocate(plan, full, nil, n)
	alloc := allocate(plan, avail, wonBy, n)
	total := 0
	mix := make([]string, len(plan))
	for i, p := range plan {
		total += alloc[i]
		mix[i] = fmt.Sprintf("%s %d of quota %d (rate %.2f, %d strong read)", p.name, alloc[i], quota[i], p.rate, len(strong[i]))
		if alloc[i] < quota[i] {
			sel.notes = append(sel.notes, fmt.Sprintf("short %s: %d strong pins for a quota of %d", p.name, alloc[i], quota[i]))
		}
		for j := wonBy[i]; j < alloc[i]; j++ {
			reason := fmt.Sprintf("%s share %d/%d", p.name, j+1, quota[i])
			if j >= quota[i] {
				reason = fmt.Sprintf("%s fills a shortfall (%d over quota %d)", p.name, j+1-quota[i], quota[i])
			}
			sel.picks = append(sel.picks, pick{e: strong[i][j-wonBy[i]], reason: reason})
		}
	}
	sel.notes = append([]string{"mix: " + strings.Join(mix, ", ")}, sel.notes...)
	weakUsed := make([]int, len(plan))
	if floor := min(minChunk, n); total < floor {
		wavail := make([]int, len(plan))
		for i := range plan {
			wavail[i] = len(weak[i])
		}
		weakUsed = allocate(plan, wavail, nil, floor-total)
		for i, p := range plan {
			for j := 0; j < weakUsed[i]; j++ {
				e := weak[i][j]
				sel.picks = append(sel.picks, pick{e: e, weak: true, reason: fmt.Sprintf("%s weak fill (%.4g < %.4g, chunk under min %d)", p.name, e.Score, p.threshold, minChunk)})
			}
		}
	}
	for i := range plan {
		sel.deferred = append(sel.deferred, weak[i][weakUsed[i]:]...)
	}
	for k := range sel.picks {
		if r := sel.picks[k].e.Reason; r != "" {
			sel.picks[k].reason += "; " + r
		}
	}
	return sel
}

// arrange orders picks best-first (score, then pin) under the diversity rule: no more than
// maxRun pins in a row from one author or one board. At each position it places the best pin
// that keeps the rule; when none does, it places the best pin anyway and says so.
func arrange(picks []pick, maxRun int) ([]pick, []string) {
	rest := append([]pick(nil), picks...)
	sort.SliceStable(rest, func(i, j int) bool {
		if rest[i].e.Score != rest[j].e.Score {
			return rest[i].e.Score > rest[j].e.Score
		}
		return rest[i].e.Pin < rest[j].e.Pin
	})
	if maxRun <= 0 {
		return rest, nil
	}
	var notes []string
	out := make([]pick, 0, len(rest))
	breaks := func(p pick) string {
		if len(out) < maxRun {
			return ""
		}
		tail := out[len(out)-maxRun:]
		sameAuthor, sameBoard := p.e.Author != 0, p.e.Board != 0
		for _, q := range tail {
			sameAuthor = sameAuthor && q.e.Author == p.e.Author
			sameBoard = sameBoard && q.e.Board == p.e.Board
		}
		switch {
		case sameAuthor:
			return fmt.Sprintf("author %d", uint64(p.e.Author))
		case sameBoard:
			return fmt.Sprintf("board %d", uint64(p.e.Board))
		}
		return ""
	}
	for len(rest) > 0 {
		chosen := -1
		for i, p := range rest {
			if why := breaks(p); why == "" {
				chosen = i
				break
			} else if i == 0 {
				notes = append(notes, fmt.Sprintf("diversity: pin %d held back at position %d (%d in a row from %s)", uint64(p.e.Pin), len(out)+1, maxRun, why))
			}
		}
		if chosen < 0 {
			chosen = 0
			notes = append(notes, fmt.Sprintf("diversity: relaxed at position %d, no other pin left", len(out)+1))
		}
		out = append(out, rest[chosen])
		rest = append(rest[:chosen], rest[chosen+1:]...)
	}
	return out, notes
}

// describe formats one entry for debug lines.
func describe(e zen.PoolEntry) string {
	return fmt.Sprintf("pin %d %s score %.4g", uint64(e.Pin), e.Source.String(), e.Score)
}

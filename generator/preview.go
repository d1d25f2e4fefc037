package generator

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/smartfeed/smartfeed/zen"
)

// SourceExplain is one source's part in a composition: its configured rate and threshold, the
// slots the rates give it (Quota), the pins it supplies (Chosen: more than the quota when it
// fills another source's shortfall), the candidates read, and its pins deferred (weak pins,
// under the threshold, left in the pools for a later session).
type SourceExplain struct {
	Source     zen.Source
	Name       string
	Rate       float64 // normalized: the rates of all sources add up to 1
	Threshold  float64
	Quota      int
	Chosen     int
	Candidates int
	Deferred   int
}

// Preview is what GenerateChunk would compose for the user now, and why: the chunk (without an
// ID: nothing was recorded), the size wanted, each source's rate, quota and deferrals, the pins
// deferred, and the explanation lines GenerateChunk's Debug option gives.
type Preview struct {
	Chunk    Chunk
	Wanted   int
	Sources  []SourceExplain
	Deferred []Item
}

// Preview composes the user's next chunk as GenerateChunk would, in one round, and explains
// it, taking nothing: no pin is claimed or leaves the pools, no chunk is recorded and the
// user's visit state is unchanged, so the next GenerateChunk (and the next visit's size) are
// as if Preview had not run. Deleted candidates are left out as GenerateChunk leaves them out,
// but stay in the pools for GenerateChunk to drop. A pin a concurrent chunk has claimed but
// not yet taken may appear. Pools.Top may delete pool rows already dead, as any read does.
func (g *Generator) Preview(ctx context.Context, user zen.ID, max int) (Preview, error) {
	if err := checkUser(user); err != nil {
		return Preview{}, err
	}
	if max < 0 || max > HardMaxChunk {
		return Preview{}, fmt.Errorf("%w: max %d not in [0, %d]", ErrInvalidArgument, max, HardMaxChunk)
	}
	cfg := g.cfg.Load()
	nowMs := g.now().UnixMilli()
	dbg := &debugLog{on: true}
	st, _, err := g.loadState(ctx, user)
	if err != nil {
		return Preview{}, err
	}
	n, note := wantedSize(cfg, st.LastVisitMs, nowMs, st.Owed, max)
	dbg.add("size: %s", note)
	plan := cfg.plan()
	k := int(math.Ceil(float64(n) * cfg.ReadFactor))
	dbg.add("read: best %d per source (n %d × read_factor %g)", k, n, cfg.ReadFactor)
	expireBefore := nowMs - time.Duration(cfg.MaxAge).Milliseconds()

	lists := make([][]zen.PoolEntry, len(plan))
	var ask []zen.ID
	for i, p := range plan {
		if n == 0 {
			break
		}
		top, err := g.pools.Top(ctx, user, p.src, min(k, HardMaxChunk*10))
		if err != nil {
			return Preview{}, fmt.Errorf("read pool %d/%s: %w", uint64(user), p.name, err)
		}
		for _, e := range top {
			if e.CreatedMs < expireBefore {
				dbg.add("expired: %s, left for the sweep", describe(e))
				continue
			}
			lists[i] = append(lists[i], e)
			ask = append(ask, e.Pin)
		}
	}
	lists = zen.BestAcrossSources(lists)
	if err := g.previewLive(ctx, user, lists, ask, dbg); err != nil {
		return Preview{}, err
	}

	out := Preview{Wanted: n, Chunk: Chunk{User: user, CreatedMs: nowMs}}
	sel := choose(plan, lists, make([]int, len(plan)), n, cfg.MinChunk)
	for _, s := range sel.notes {
		dbg.add("%s", s)
	}
	out.Sources = explainSources(plan, lists, sel, n)
	for _, e := range sel.deferred {
		dbg.add("defer: %s under threshold %.4g, left for a later session", describe(e), g.threshold(plan, e.Source))
		out.Deferred = append(out.Deferred, itemOf(e, fmt.Sprintf("%s under threshold %.4g", e.Source.String(), g.threshold(plan, e.Source))))
	}
	arranged, notes := arrange(sel.picks, cfg.MaxRun)
	for _, s := range notes {
		dbg.add("%s", s)
	}
	for i, p := range arranged {
		out.Chunk.Items = append(out.Chunk.Items, itemOf(p.e, p.reason))
		dbg.add("pick %d: %s: %s", i+1, describe(p.e), p.reason)
	}
	dbg.add("preview: %d of %d wanted; nothing taken", len(out.Chunk.Items), n)
	out.Chunk.Debug = dbg.lines
	return out, nil
}

// previewLive leaves the deleted pins out of lists, in place, with a debug line for each.
func (g *Generator) previewLive(ctx context.Context, user zen.ID, lists [][]zen.PoolEntry, ask []zen.ID, dbg *debugLog) error {
	if g.live == nil || len(ask) == 0 {
		return nil
	}
	live, err := g.live.Live(ctx, ask)
	if err != nil {
		return fmt.Errorf("liveness of %d pins of %d: %w", len(ask), uint64(user), err)
	}
	for i, l := range lists {
		kept := l[:0]
		for _, e := range l {
			if live[e.Pin] {
				kept = append(kept, e)
			} else {
				dbg.add("deleted: %s, left out (the next chunk drops it from the pools)", describe(e))
			}
		}
		lists[i] = kept
	}
	return nil
}

// explainSources says, for each source of plan, its rate, threshold, quota of an n-pin chunk,
// candidates and how many of them sel chose and deferred.
func explainSources(plan []sourcePlan, lists [][]zen.PoolEntry, sel selection, n int) []SourceExplain {
	full := make([]int, len(plan))
	for i := range full {
		full[i] = n
	}
	quota := allocate(plan, full, nil, n)
	var out []SourceExplain
	for i, p := range plan {
		se := SourceExplain{Source: p.src, Name: p.name, Rate: p.rate, Threshold: p.threshold,
			Quota: quota[i], Candidates: len(lists[i])}
		for _, pk := range sel.picks {
			if pk.e.Source == p.src {
				se.Chosen++
			}
		}
		for _, e := range sel.deferred {
			if e.Source == p.src {
				se.Deferred++
			}
		}
		out = append(out, se)
	}
	return out
}

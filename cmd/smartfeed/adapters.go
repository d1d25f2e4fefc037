package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/generator"
	"github.com/smartfeed/smartfeed/graphsvc"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen"
)

// localGenerator adapts an in-process *generator.Generator to feedsvc.Generator.
type localGenerator struct{ g *generator.Generator }

func (a localGenerator) GenerateChunk(ctx context.Context, user zen.ID) (feedsvc.Chunk, error) {
	// The feed service records every chunk it serves as a pending row before the answer.
	c, err := a.g.GenerateChunk(ctx, user, generator.Options{CallerRecords: true})
	if err != nil {
		return feedsvc.Chunk{}, err
	}
	out := feedsvc.Chunk{ID: c.ID, User: c.User, Items: make([]feedsvc.Item, len(c.Items))}
	for i, it := range c.Items {
		out.Items[i] = feedsvc.Item{Pin: it.Pin, Source: it.Source, Score: it.Score, Author: it.Author, Board: it.Board, Reason: it.Reason}
	}
	return out, nil
}

func (a localGenerator) Settle(ctx context.Context, user zen.ID, chunkID string, delivered bool) error {
	return a.g.Settle(ctx, user, chunkID, delivered)
}

// InFlightUsers implements feedsvc.InFlight.
func (a localGenerator) InFlightUsers(ctx context.Context, after zen.ID, limit int) ([]zen.ID, error) {
	return a.g.InFlightUsers(ctx, after, limit)
}

// PendingChunks implements feedsvc.InFlight.
func (a localGenerator) PendingChunks(ctx context.Context, user zen.ID) ([]feedsvc.InFlightChunk, error) {
	cs, err := a.g.Pending(ctx, user)
	if err != nil {
		return nil, err
	}
	out := make([]feedsvc.InFlightChunk, len(cs))
	for i, c := range cs {
		out[i] = feedsvc.InFlightChunk{ID: c.ID, CreatedMs: c.CreatedMs}
	}
	return out, nil
}

// Liveness cache of the read path (zen.Graph.CacheLiveness): how long an answer is kept, and how
// many pins are remembered (about 40 bytes each).
const (
	liveCacheTTL     = time.Second
	liveCacheEntries = 1 << 18
)

// graphLiveness answers generator.Liveness and feedsvc.Liveness with one batched object read:
// a pin is live when zen.Graph.LiveMany says so (absent and soft-deleted objects are not), which
// reads only the objects' "active" field instead of decoding them whole.
type graphLiveness struct{ g *zen.Graph }

func (l graphLiveness) Live(ctx context.Context, pins []zen.ID) (map[zen.ID]bool, error) {
	out, err := l.g.LiveMany(ctx, pins)
	if err != nil {
		return nil, fmt.Errorf("liveness: %w", err)
	}
	return out, nil
}

// setLiveness answers feedsvc.Liveness for the feed service from the deletion log's set
// (feedsvc.DeletedSet): a pin is live unless its deletion was logged, one point read of the log
// per call instead of a read of every pin. A user (GetFeed's check that the reader exists) must
// also be an object of the graph (graphLiveness): the set names deleted users, not absent ones.
// Objects are never removed, only soft-deleted (which the set sees), so a user found once is
// remembered (up to maxKnownUsers) and not read again.
type setLiveness struct {
	set *feedsvc.DeletedSet
	g   *zen.Graph

	mu    sync.Mutex
	known map[zen.ID]struct{}
}

// maxKnownUsers bounds the users setLiveness remembers as existing (past it, it starts over).
const maxKnownUsers = 1 << 20

func newSetLiveness(set *feedsvc.DeletedSet, g *zen.Graph) *setLiveness {
	return &setLiveness{set: set, g: g, known: map[zen.ID]struct{}{}}
}

func (l *setLiveness) Live(ctx context.Context, ids []zen.ID) (map[zen.ID]bool, error) {
	live, err := l.set.Live(ctx, ids)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(ids, func(id zen.ID) bool { return id.Type() == zen.TypeUser }) {
		// A page's pins: only users need the lock below.
		return live, nil
	}
	var users []zen.ID
	l.mu.Lock()
	for _, id := range ids {
		if _, ok := l.known[id]; !ok && live[id] && id.Type() == zen.TypeUser {
			users = append(users, id)
		}
	}
	l.mu.Unlock()
	if len(users) == 0 {
		return live, nil
	}
	exist, err := graphLiveness{l.g}.Live(ctx, users)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range users {
		if !exist[u] {
			delete(live, u)
			continue
		}
		if len(l.known) >= maxKnownUsers {
			clear(l.known)
		}
		l.known[u] = struct{}{}
	}
	return live, nil
}

// graphEligibility answers feedsvc.Eligibility and generator.Eligibility from the graph's
// follow edges: a following item stays while the user follows its author or its board (the
// worker's unfollow cleanup keeps a pool entry on the same terms), an interest item while the
// user follows one of the pin's interests (up to maxPinInterests of them); other sources stay.
// One scan of each interest item's interests, then one batched point read of every follow edge
// asked. For the feed service it names the deleted pins too: those deleted names, or, without
// it, those graphLiveness finds deleted.
type graphEligibility struct {
	g       *zen.Graph
	deleted feedsvc.Liveness
}

// maxPinInterests bounds the interests of one pin read for the check (a pin has up to 64).
const maxPinInterests = 64

// followItem is what the follow check needs of an item, from either service's Item.
type followItem struct {
	Pin, Author, Board zen.ID
	Source             zen.Source
}

// Removed implements feedsvc.Eligibility: the pins whose follow is gone, and the deleted ones.
func (e graphEligibility) Removed(ctx context.Context, user zen.ID, items []feedsvc.Item) (map[zen.ID]bool, error) {
	fs := make([]followItem, len(items))
	pins := make([]zen.ID, len(items))
	for i, it := range items {
		fs[i] = followItem{Pin: it.Pin, Author: it.Author, Board: it.Board, Source: it.Source}
		pins[i] = it.Pin
	}
	out, err := e.unfollowed(ctx, user, fs)
	if err != nil {
		return nil, err
	}
	if len(pins) == 0 {
		return out, nil
	}
	var lv feedsvc.Liveness = graphLiveness{e.g}
	if e.deleted != nil {
		lv = e.deleted
	}
	live, err := lv.Live(ctx, pins)
	if err != nil {
		return nil, err
	}
	for _, p := range pins {
		if !live[p] {
			out[p] = true
		}
	}
	return out, nil
}

// Unfollowed implements generator.Eligibility (GeneratorService.CheckPins).
func (e graphEligibility) Unfollowed(ctx context.Context, user zen.ID, items []generator.Item) (map[zen.ID]bool, error) {
	fs := make([]followItem, len(items))
	for i, it := range items {
		fs[i] = followItem{Pin: it.Pin, Author: it.Author, Board: it.Board, Source: it.Source}
	}
	return e.unfollowed(ctx, user, fs)
}

// unfollowed returns the pins among items that user no longer follows the source of.
func (e graphEligibility) unfollowed(ctx context.Context, user zen.ID, items []followItem) (map[zen.ID]bool, error) {
	idx := map[zen.EdgeKey]int{}
	var keys []zen.EdgeKey
	ask := func(t zen.EdgeType, to zen.ID, want zen.Type) int {
		if to == 0 || to.Check(want) != nil {
			return -1
		}
		k := zen.EdgeKey{From: user, Type: t, To: to}
		i, ok := idx[k]
		if !ok {
			i = len(keys)
			idx[k] = i
			keys = append(keys, k)
		}
		return i
	}
	// Each checked pin and the edges of which one must stand for it to stay.
	need := map[zen.ID][]int{}
	for _, it := range items {
		if _, done := need[it.Pin]; done {
			continue
		}
		var ks []int
		switch it.Source {
		case zen.SourceFollowing:
			for _, i := range []int{ask(zen.EdgeFollowsUser, it.Author, zen.TypeUser), ask(zen.EdgeFollowsBoard, it.Board, zen.TypeBoard)} {
				if i >= 0 {
					ks = append(ks, i)
				}
			}
			if len(ks) == 0 {
				continue // names neither: nothing to check it against
			}
		case zen.SourceInterest:
			ins, _, err := e.g.Members(ctx, it.Pin, zen.EdgePinInterests, maxPinInterests)
			if err != nil {
				return nil, fmt.Errorf("interests of pin %d: %w", it.Pin, err)
			}
			for _, in := range ins {
				if i := ask(zen.EdgeFollowsInterest, in, zen.TypeInterest); i >= 0 {
					ks = append(ks, i)
				}
			}
		default:
			continue
		}
		need[it.Pin] = ks
	}
	out := map[zen.ID]bool{}
	if len(need) == 0 {
		return out, nil
	}
	var has []bool
	if len(keys) > 0 {
		var err error
		if has, err = e.g.HasEdges(ctx, keys); err != nil {
			return nil, fmt.Errorf("follows of %d: %w", user, err)
		}
	}
	for pin, ks := range need {
		if !slices.ContainsFunc(ks, func(i int) bool { return has[i] }) {
			out[pin] = true
		}
	}
	return out, nil
}

var (
	_ feedsvc.Eligibility   = graphEligibility{}
	_ generator.Eligibility = graphEligibility{}
	_ generator.Liveness    = graphLiveness{}
	_ feedsvc.Liveness      = graphLiveness{}
	_ feedsvc.Liveness      = (*setLiveness)(nil)
	_ feedsvc.Activity      = (*worker.Worker)(nil)
	_ feedsvc.InFlight      = localGenerator{}
)

// feedRemover hands the worker's user-delete job to the feed service of this process (wired only
// when the process has the feed role). The worker is built before the feed service, so it looks
// the service up when a delete runs.
type feedRemover struct{ a *app }

var _ worker.FeedRemover = feedRemover{}

// DeleteFeed removes the user's materialized feed through this process's feed service.
func (r feedRemover) DeleteFeed(ctx context.Context, user zen.ID) error {
	if r.a.feed == nil {
		return errNoFeedRole
	}
	return r.a.feed.DeleteFeed(ctx, user)
}

// errNoFeedRole: this process does not serve feeds, so it cannot delete one.
var errNoFeedRole = errors.New("no feed service in this process")

// graphObjects adapts the process's graph to feedsvc.ObjectLookup (GetFeed's include_objects):
// the objects in the form GraphService.GetObjects answers them.
type graphObjects struct{ g *zen.Graph }

// Objects implements feedsvc.ObjectLookup.
func (o graphObjects) Objects(ctx context.Context, ids []zen.ID) (map[zen.ID]*graphv1.Object, error) {
	live, err := o.g.GetMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[zen.ID]*graphv1.Object, len(live))
	for id, obj := range live {
		if m := graphsvc.ObjectMsg(obj); m != nil {
			out[id] = m
		}
	}
	return out, nil
}

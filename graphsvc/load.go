package graphsvc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
)

// LoadUser is one user of a population to load: the fields of CreateUser. CreatedMs (0: the
// load's start) becomes the object's created_ms.
type LoadUser struct {
	Username    string `json:"username"`
	Email       string `json:"email"`
	DisplayName string `json:"display_name,omitempty"`
	CreatedMs   int64  `json:"created_ms,omitempty"`
}

// LoadBoard is one board to load: the fields of CreateBoard, the owner named by username. Key
// names the board for the follows of the same input and is its request_id: loading it again
// finds the board the first load made, as a retried CreateBoard with that request_id does.
type LoadBoard struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	CreatedMs   int64  `json:"created_ms,omitempty"`
}

// LoadFollow is one follow to load: User (a username) follows the user named Target, or the
// board whose key is Board. CreatedMs (0: the load's start) orders the follow in its lists.
type LoadFollow struct {
	User      string `json:"user"`
	Target    string `json:"target,omitempty"`
	Board     string `json:"board,omitempty"`
	CreatedMs int64  `json:"created_ms,omitempty"`
}

// LoadRecord is one record of the input: exactly one of its fields is set. A follow or board
// may only name users and boards of earlier records.
type LoadRecord struct {
	User   *LoadUser   `json:"user,omitempty"`
	Board  *LoadBoard  `json:"board,omitempty"`
	Follow *LoadFollow `json:"follow,omitempty"`
}

// LoadSource yields the records of a population in order; Next returns io.EOF after the last.
type LoadSource interface {
	Next() (LoadRecord, error)
}

// LoadStats counts what a load did. Existing objects are users whose username, and boards whose
// key, an earlier load (or the API) already holds for a live object: they are reused, not
// created again. Refused records were invalid or conflicting; Reasons keeps the first few.
type LoadStats struct {
	Users, UsersExisting, UsersRefused       int64
	Boards, BoardsExisting, BoardsRefused    int64
	Follows, FollowsExisting, FollowsRefused int64
	Malformed                                int64 // records holding none or several of user, board, follow
	Rows                                     int64 // rows written (objects, keys, edges, counts)
	Recounted                                int   // lists of existing objects recounted at the end
	Elapsed                                  time.Duration
	Reasons                                  []string
}

// maxLoadReasons bounds LoadStats.Reasons.
const maxLoadReasons = 20

// Loader writes a population of users, boards and follows through zen's batched writes: the
// rows CreateUser, CreateBoard (with the board's key as request_id) and Follow (both directions)
// write, with the same object data, unique keys, edge rows and counts, at the store's batched
// write speed. It enqueues no jobs: the follow-backfill a Follow enqueues has nothing to copy
// from users who have no pins yet.
//
// IDs come in blocks from the per-(shard, type) counters (one increment per shard per chunk of
// users, not one per object); users are spread over the open shards, boards placed on their
// owner's shard, as the API places them. Memory is bounded by the number of users and boards
// (their IDs and list counts); follows are streamed.
//
// A load is idempotent: rerun after a crash (or on the same input), it finds each user by its
// username and each board by its key and reuses them; the follows of reused objects are checked
// against the stored rows and only the missing ones written, and the lists of reused objects
// are recounted from their rows at the end. A follow listed twice in one input between two new
// users is counted twice (the loader does not remember 100M edges to tell).
type Loader struct {
	g        *zen.Graph
	now      func() time.Time
	batch    int
	chunk    int
	progress func(LoadStats)
	every    time.Duration
	ids      func(kind, key string, id zen.ID)
	sink     zen.BulkSink
}

// LoaderOption configures a Loader.
type LoaderOption func(*Loader)

// WithLoadBatch sets the rows per store write (default 50,000).
func WithLoadBatch(n int) LoaderOption { return func(l *Loader) { l.batch = max(1, n) } }

// WithLoadChunk sets how many users or boards are checked and allocated together (default 10,000).
func WithLoadChunk(n int) LoaderOption { return func(l *Loader) { l.chunk = max(1, n) } }

// WithLoadProgress calls fn with the running counts about every interval.
func WithLoadProgress(every time.Duration, fn func(LoadStats)) LoaderOption {
	return func(l *Loader) { l.progress, l.every = fn, every }
}

// NewLoader returns a Loader over g; now nil means time.Now (the created_ms of records that
// carry none, and the seq of follows that carry none).
func NewLoader(g *zen.Graph, now func() time.Time, opts ...LoaderOption) *Loader {
	if now == nil {
		now = time.Now
	}
	l := &Loader{g: g, now: now, batch: 50000, chunk: 10000}
	for _, o := range opts {
		o(l)
	}
	return l
}

type loadList struct {
	from zen.ID
	t    zen.EdgeType
}

// loadRun is the state of one Load call.
type loadRun struct {
	l       *Loader
	b       *zen.Bulk
	startMs int64
	st      LoadStats
	start   time.Time
	last    time.Time
	users   map[string]zen.ID // lowercase username → ID, every user of the input so far
	boards  map[string]zen.ID // key → ID
	old     map[zen.ID]bool   // objects that existed before this load
	counts  map[loadList]int64
	recount map[loadList]bool
	pendU   []LoadUser
	pendB   []LoadBoard
	check   []zen.Edge // edges with an existing endpoint, checked in batches
	open    []uint16   // the open shards, round-robin from shardRR
	shardRR int
}

// Load writes the records of src. It stops at the first error of the store or of src (records
// written so far stay; rerunning finishes the load), and skips refused records, counting them.
func (l *Loader) Load(ctx context.Context, src LoadSource) (LoadStats, error) {
	var bopts []zen.BulkOption
	if l.sink != nil {
		bopts = append(bopts, zen.WithBulkSink(l.sink))
	}
	r := &loadRun{l: l, b: l.g.NewBulk(l.batch, bopts...), start: time.Now(), startMs: l.now().UnixMilli(),
		users: map[string]zen.ID{}, boards: map[string]zen.ID{}, old: map[zen.ID]bool{},
		counts: map[loadList]int64{}, recount: map[loadList]bool{}}
	r.last = r.start
	err := r.run(ctx, src)
	r.st.Rows = r.b.Rows()
	r.st.Elapsed = time.Since(r.start)
	return r.st, err
}

func (r *loadRun) run(ctx context.Context, src LoadSource) error {
	for {
		rec, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("load: read input: %w", err)
		}
		switch {
		case rec.User != nil && rec.Board == nil && rec.Follow == nil:
			if len(r.pendB) > 0 {
				if err := r.flushBoards(ctx); err != nil {
					return err
				}
			}
			r.pendU = append(r.pendU, *rec.User)
			if len(r.pendU) >= r.l.chunk {
				if err := r.flushUsers(ctx); err != nil {
					return err
				}
			}
		case rec.Board != nil && rec.User == nil && rec.Follow == nil:
			if err := r.flushUsers(ctx); err != nil {
				return err
			}
			r.pendB = append(r.pendB, *rec.Board)
			if len(r.pendB) >= r.l.chunk {
				if err := r.flushBoards(ctx); err != nil {
					return err
				}
			}
		case rec.Follow != nil && rec.User == nil && rec.Board == nil:
			if err := r.flushUsers(ctx); err != nil {
				return err
			}
			if err := r.flushBoards(ctx); err != nil {
				return err
			}
			if err := r.follow(ctx, *rec.Follow); err != nil {
				return err
			}
		default:
			r.refuse(&r.st.Malformed, "a record must hold exactly one of user, board, follow")
		}
		r.tick()
	}
	if err := r.flushUsers(ctx); err != nil {
		return err
	}
	if err := r.flushBoards(ctx); err != nil {
		return err
	}
	if err := r.checkFollows(ctx); err != nil {
		return err
	}
	for k, n := range r.counts {
		if err := r.b.SetCount(ctx, k.from, k.t, n); err != nil {
			return fmt.Errorf("load: %w", err)
		}
	}
	if err := r.b.Flush(ctx); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return r.recountOld(ctx)
}

// tick reports progress about every interval.
func (r *loadRun) tick() {
	if r.l.progress == nil {
		return
	}
	if now := time.Now(); now.Sub(r.last) >= r.l.every {
		r.last = now
		st := r.st
		st.Rows, st.Elapsed = r.b.Rows(), now.Sub(r.start)
		r.l.progress(st)
	}
}

// refuse counts a refused record and keeps its reason while there is room.
func (r *loadRun) refuse(n *int64, format string, args ...any) {
	*n++
	if len(r.st.Reasons) < maxLoadReasons {
		r.st.Reasons = append(r.st.Reasons, fmt.Sprintf(format, args...))
	}
}

// statusMsg is the message of a validation error (a gRPC status from the graph's checks).
func statusMsg(err error) string { return status.Convert(err).Message() }

func (r *loadRun) createdMs(ms int64) int64 {
	if ms > 0 {
		return ms
	}
	return r.startMs
}

// nextShards returns a shard for each of n new objects, round-robin over the open shards.
func (r *loadRun) nextShards(n int) []uint16 {
	if r.open == nil {
		r.open = r.l.g.Shards().OpenShards()
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = r.open[r.shardRR%len(r.open)]
		r.shardRR++
	}
	return out
}

// allocate gives each new object of type t on shards[i] an ID, one counter increment per shard.
func (r *loadRun) allocate(ctx context.Context, t zen.Type, shards []uint16) ([]zen.ID, error) {
	per := map[uint16]int{}
	for _, s := range shards {
		per[s]++
	}
	first := make(map[uint16]zen.ID, len(per))
	var mu sync.Mutex
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(16)
	for s, n := range per {
		eg.Go(func() error {
			id, err := r.l.g.AllocIDs(ectx, s, t, n)
			if err != nil {
				return err
			}
			mu.Lock()
			first[s] = id
			mu.Unlock()
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	out := make([]zen.ID, len(shards))
	for i, s := range shards {
		out[i] = first[s]
		first[s]++
	}
	return out, nil
}

// holdersLive reports which of the nonzero ids are live objects.
func (r *loadRun) holdersLive(ctx context.Context, ids ...[]zen.ID) (map[zen.ID]bool, error) {
	var all []zen.ID
	for _, l := range ids {
		for _, id := range l {
			if id != 0 {
				all = append(all, id)
			}
		}
	}
	if len(all) == 0 {
		return map[zen.ID]bool{}, nil
	}
	live, err := r.l.g.LiveMany(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	return live, nil
}

// recheckBoards queues the owner's user→boards edge of boards an earlier load made, with the
// seq CreateBoard gives it (the board's created_ms), so a load that stopped before writing the
// edge is finished as a retried CreateBoard finishes it.
func (r *loadRun) recheckBoards(ctx context.Context, ids []zen.ID) error {
	if len(ids) == 0 {
		return nil
	}
	objs, err := r.l.g.GetMany(ctx, ids)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	for _, id := range ids {
		o, ok := objs[id]
		if !ok {
			continue
		}
		r.check = append(r.check, zen.Edge{From: graphRef(o.Data, "owner"), Type: zen.EdgeUserBoards, To: id, Seq: graphSeq(o)})
	}
	if len(r.check) >= r.l.chunk {
		return r.checkFollows(ctx)
	}
	return nil
}

// count records one more edge on the list (from, t): counted here for a new owner, recounted
// from its rows at the end for an existing one.
func (r *loadRun) count(from zen.ID, t zen.EdgeType) {
	k := loadList{from, t}
	if r.old[from] {
		r.recount[k] = true
		return
	}
	r.counts[k]++
}

// follow writes one follow's edge and inverse; a follow with an existing endpoint waits to be
// checked against the stored rows.
func (r *loadRun) follow(ctx context.Context, f LoadFollow) error {
	user, ok := r.users[strings.ToLower(f.User)]
	if !ok {
		r.refuse(&r.st.FollowsRefused, "follow: user %.40q is not a user of this input", f.User)
		return nil
	}
	var target zen.ID
	var et zen.EdgeType
	switch {
	case f.Target != "" && f.Board == "":
		target, ok = r.users[strings.ToLower(f.Target)]
		et = zen.EdgeFollowsUser
	case f.Board != "" && f.Target == "":
		target, ok = r.boards[f.Board]
		et = zen.EdgeFollowsBoard
	default:
		r.refuse(&r.st.FollowsRefused, "follow by %s: exactly one of target and board is required", f.User)
		return nil
	}
	if !ok {
		r.refuse(&r.st.FollowsRefused, "follow by %s: the target is not in this input", f.User)
		return nil
	}
	if target == user {
		r.refuse(&r.st.FollowsRefused, "follow by %s: a user cannot follow themselves", f.User)
		return nil
	}
	e := zen.Edge{From: user, Type: et, To: target, Seq: seq.FromMillis(r.createdMs(f.CreatedMs))}
	if r.old[user] || r.old[target] {
		r.check = append(r.check, e)
		if len(r.check) >= r.l.chunk {
			return r.checkFollows(ctx)
		}
		return nil
	}
	return r.writeFollow(ctx, e, true, true)
}

// writeFollow writes the follows edge and/or its inverse (the same seq), counting each.
func (r *loadRun) writeFollow(ctx context.Context, e zen.Edge, fwd, inv bool) error {
	invType, _ := e.Type.Inverse()
	if fwd {
		if err := r.b.AddEdge(ctx, e); err != nil {
			return fmt.Errorf("load: %w", err)
		}
		r.count(e.From, e.Type)
	}
	if inv {
		if err := r.b.AddEdge(ctx, zen.Edge{From: e.To, Type: invType, To: e.From, Seq: e.Seq}); err != nil {
			return fmt.Errorf("load: %w", err)
		}
		r.count(e.To, invType)
	}
	if fwd || inv {
		r.st.Follows++
	} else {
		r.st.FollowsExisting++
	}
	return nil
}

// checkFollows writes the waiting edges that touch existing objects (follows, with their
// inverses, and the user→boards edges of existing boards): a direction whose point row is stored
// keeps it (its edge row is written again, which repairs one a crash lost), a missing one is
// written with the stored direction's seq.
func (r *loadRun) checkFollows(ctx context.Context) error {
	if len(r.check) == 0 {
		return nil
	}
	pend := r.check
	r.check = nil
	keys := make([]zen.EdgeKey, 0, 2*len(pend))
	for _, e := range pend {
		keys = append(keys, zen.EdgeKey{From: e.From, Type: e.Type, To: e.To})
		if inv, ok := e.Type.Inverse(); ok {
			keys = append(keys, zen.EdgeKey{From: e.To, Type: inv, To: e.From})
		}
	}
	stored, present, err := r.l.g.EdgesPresent(ctx, keys)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	k := 0
	for _, e := range pend {
		idx := []int{k}
		_, hasInv := e.Type.Inverse()
		if hasInv {
			idx = append(idx, k+1)
		}
		k += len(idx)
		for _, j := range idx {
			if present[j] {
				e.Seq = stored[j].Seq
			}
		}
		for _, j := range idx {
			if present[j] {
				if err := r.b.RepairEdgeRow(ctx, stored[j]); err != nil {
					return fmt.Errorf("load: %w", err)
				}
				// Only an existing object has stored rows: its list is recounted at the end.
				r.recount[loadList{stored[j].From, stored[j].Type}] = true
			}
		}
		if !hasInv { // an existing board's user→boards edge
			if !present[idx[0]] {
				if err := r.b.AddEdge(ctx, e); err != nil {
					return fmt.Errorf("load: %w", err)
				}
				r.count(e.From, e.Type)
			}
			continue
		}
		if err := r.writeFollow(ctx, e, !present[idx[0]], !present[idx[1]]); err != nil {
			return err
		}
	}
	return nil
}

// recountOld recounts, from their rows, the lists of existing objects the load added to.
func (r *loadRun) recountOld(ctx context.Context) error {
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(8)
	for k := range r.recount {
		eg.Go(func() error {
			_, err := r.l.g.RecountEdges(ectx, k.from, k.t)
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return fmt.Errorf("load: recount: %w", err)
	}
	r.st.Recounted = len(r.recount)
	return nil
}

// jsonlSource reads JSON Lines records.
type jsonlSource struct {
	sc   *bufio.Scanner
	line int
}

// NewJSONLSource reads records from r, one JSON object per line (blank lines are skipped):
//
//	{"user": {"username": "ada", "email": "ada@example.com", "display_name": "Ada"}}
//	{"board": {"key": "ada-recipes", "owner": "ada", "name": "Recipes"}}
//	{"follow": {"user": "bob", "target": "ada"}}
//	{"follow": {"user": "bob", "board": "ada-recipes", "created_ms": 1700000000000}}
//
// An unknown field or a line that is not JSON stops the load with the line's number.
func NewJSONLSource(r io.Reader) LoadSource {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	return &jsonlSource{sc: sc}
}

// Next returns the next record, or io.EOF.
func (s *jsonlSource) Next() (LoadRecord, error) {
	for s.sc.Scan() {
		s.line++
		b := bytes.TrimSpace(s.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var rec LoadRecord
		if err := dec.Decode(&rec); err != nil {
			return LoadRecord{}, fmt.Errorf("line %d: %w", s.line, err)
		}
		if dec.More() {
			return LoadRecord{}, fmt.Errorf("line %d: more than one JSON value", s.line)
		}
		return rec, nil
	}
	if err := s.sc.Err(); err != nil {
		return LoadRecord{}, fmt.Errorf("line %d: %w", s.line+1, err)
	}
	return LoadRecord{}, io.EOF
}

// RowsPerSecond is the rate of rows written over the elapsed time (0 before any time passed).
func (s LoadStats) RowsPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Rows) / s.Elapsed.Seconds()
}

// String is a one-line summary of the counts and the rate.
func (s LoadStats) String() string {
	return fmt.Sprintf("users %d new, %d existing, %d refused; boards %d new, %d existing, %d refused; "+
		"follows %d new, %d existing, %d refused; %d malformed; %d rows in %s (%.0f rows/s); %d lists recounted",
		s.Users, s.UsersExisting, s.UsersRefused, s.Boards, s.BoardsExisting, s.BoardsRefused,
		s.Follows, s.FollowsExisting, s.FollowsRefused, s.Malformed, s.Rows, s.Elapsed.Round(time.Millisecond), s.RowsPerSecond(), s.Recounted)
}

// WithLoadSink hands the load's rows to sink instead of the store's writes (zen.WithBulkSink):
// on HBase, a zenhbase.Stage, which loads them as HFiles when the load ends. Nothing of a load
// through a sink is readable before it ends; a rerun after a failure loads it all again.
func WithLoadSink(sink zen.BulkSink) LoaderOption { return func(l *Loader) { l.sink = sink } }

// WithLoadIDs calls fn with the ID of every user and board of the input, new or existing, as
// the load resolves it: kind "user" with the username lowercased, or kind "board" with the
// board's key.
func WithLoadIDs(fn func(kind, key string, id zen.ID)) LoaderOption {
	return func(l *Loader) { l.ids = fn }
}

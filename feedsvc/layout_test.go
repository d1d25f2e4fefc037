package feedsvc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/zen"
)

// userOn returns user n on shard.
func userOn(t testing.TB, shard uint16, n uint64) zen.ID {
	t.Helper()
	id, err := zen.NewID(shard, zen.TypeUser, n)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// indexRows returns the pending-index rows of tb (every shard), as user/seq pairs.
func indexRows(t testing.TB, tb zen.Table) []string {
	t.Helper()
	var out []string
	for _, kv := range dump(t, tb) {
		if len(kv.Key) != indexKeyLen || kv.Key[8] != prefixPendingIndex {
			continue
		}
		base := zen.ID(binary.BigEndian.Uint64(kv.Key))
		u, seq, ok := indexRow(base.Shard(), kv.Key)
		if !ok {
			t.Errorf("index row %x does not decode", kv.Key)
			continue
		}
		out = append(out, fmt.Sprintf("%d/%d", u, seq))
	}
	return out
}

// checkShardFirst asserts that the first 8 bytes of every row of tb decode to an ID on the
// shard of one of users, or to the base of such a shard for the pending index ('q') rows, and
// that each key lies in its shard's HBase region [BE64(s<<46), BE64((s+1)<<46)). It returns
// the number of rows of each kind.
func checkShardFirst(t *testing.T, name string, tb zen.Table, users []zen.ID) map[byte]int {
	t.Helper()
	isUser := map[zen.ID]bool{}
	for _, u := range users {
		isUser[u] = true
	}
	kinds := map[byte]int{}
	for _, kv := range dump(t, tb) {
		if len(kv.Key) < 9 {
			t.Errorf("%s: key %x shorter than ID | kind", name, kv.Key)
			continue
		}
		id := zen.ID(binary.BigEndian.Uint64(kv.Key))
		kind := kv.Key[8]
		kinds[kind]++
		lo := binary.BigEndian.AppendUint64(nil, uint64(id.Shard())<<46)
		hi := binary.BigEndian.AppendUint64(nil, uint64(id.Shard()+1)<<46)
		if bytes.Compare(kv.Key, lo) < 0 || (id.Shard() < zen.MaxShard && bytes.Compare(kv.Key, hi) >= 0) {
			t.Errorf("%s: key %x outside the region of shard %d", name, kv.Key, id.Shard())
		}
		if kind == prefixPendingIndex {
			u, _, ok := indexRow(id.Shard(), kv.Key)
			if !ok || id.Type() != 0 || id.Local() != 0 || !isUser[u] {
				t.Errorf("%s: index key %x: starts with %#x, not the base of user %d's shard", name, kv.Key, uint64(id), u)
			}
			continue
		}
		if !isUser[id] {
			t.Errorf("%s: key %x (kind %q) starts with %d (shard %d, type %d), not a user of the test", name, kv.Key, kind, id, id.Shard(), id.Type())
		}
	}
	return kinds
}

// TestRowsStartWithUserShard: every row GetFeed and Materialize write (on the primary and,
// through the replicator, the standby) begins with the user's ID, or the user's shard base for
// the pending index, so HBase writes land in the region of the user's shard, not in one region.
func TestRowsStartWithUserShard(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.MaxItems = 7 })
	users := []zen.ID{userOn(t, 0, 1), userOn(t, 7, 1), userOn(t, 4095, 1), userOn(t, zen.MaxShard, 1)}
	for _, u := range users {
		if _, err := e.svc.GetFeed(t.Context(), Request{User: u}); err != nil {
			t.Fatal(err)
		}
	}
	e.svc.Wait()
	e.flush(t)
	for name, tb := range map[string]zen.Table{"primary": e.primary, "standby": e.standby} {
		kinds := checkShardFirst(t, name+" served", tb, users)
		// No 'c' counter rows: chunk sequences come from the clock.
		if diff := cmp.Diff(map[byte]int{'f': 4 + 4, 'd': 4, 'q': 4}, kinds); name == "primary" && diff != "" {
			t.Errorf("%s rows by kind after serving (-want +got):\n%s", name, diff)
		}
	}
	for range 2 {
		e.materialize(t)
		for _, u := range users {
			if _, err := e.svc.GetFeed(t.Context(), Request{User: u}); err != nil {
				t.Fatal(err)
			}
		}
		e.svc.Wait()
	}
	e.materialize(t) // the third chunk of each user; trimming to 7 items drops the first
	e.flush(t)
	for name, tb := range map[string]zen.Table{"primary": e.primary, "standby": e.standby} {
		kinds := checkShardFirst(t, name+" materialized", tb, users)
		want := map[byte]int{'f': 4*7 + 4, 'p': 4 * 7, 'd': 4 * 2}
		if diff := cmp.Diff(want, kinds); diff != "" {
			t.Errorf("%s rows by kind after materializing (-want +got):\n%s", name, diff)
		}
	}
	e.gen.err = errGen
	for _, u := range users {
		e.user = u
		if got := len(e.all(t, 3)); got != 7 {
			t.Errorf("feed of user on shard %d: %d items, want 7", u.Shard(), got)
		}
	}
}

// TestRecoverAllAcrossShards: pending chunks of users on shards 0, 7 and 4095 are all found
// through the per-shard index, across several calls limited to fewer rows than there are, and
// the pass ends with next = 0 and an empty index.
func TestRecoverAllAcrossShards(t *testing.T) {
	for _, limit := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("limit%d", limit), func(t *testing.T) {
			e, users := pendingOnShards(t, nil)
			want := len(users) * 2
			total, calls := 0, 0
			var nexts []zen.ID
			after := zen.ID(0)
			for {
				next, n, err := e.svc.RecoverAll(t.Context(), after, time.Minute, limit)
				if err != nil {
					t.Fatal(err)
				}
				calls++
				total += n
				if next == 0 {
					break
				}
				if next <= after {
					t.Fatalf("RecoverAll went back: next %d after %d", next, after)
				}
				nexts = append(nexts, next)
				if calls > 2*want+2 {
					t.Fatal("RecoverAll does not end")
				}
				after = next
			}
			if total != want {
				t.Errorf("recovered %d chunks, want %d", total, want)
			}
			if limit < want && calls < 2 {
				t.Errorf("%d calls with limit %d for %d index rows", calls, limit, want)
			}
			for _, n := range nexts {
				if n.Check(zen.TypeUser) != nil {
					t.Errorf("next %d is not a user", n)
				}
			}
			for i, u := range users {
				for c := range 2 {
					id := fmt.Sprintf("c%d", 1+i+c*len(users))
					if st, err := e.svc.ChunkStatus(t.Context(), u, id); err != nil || st != ChunkDone {
						t.Errorf("ChunkStatus(shard %d, %s) = %v, %v; want done", u.Shard(), id, st, err)
					}
				}
			}
			if rows := indexRows(t, e.primary); len(rows) != 0 {
				t.Errorf("pending index after recovery: %v", rows)
			}
		})
	}
}

// TestRecoverAllFromShardOfAfter: a pass starting after a user walks on from that user's
// shard, and IndexShards bounds the shards walked.
func TestRecoverAllFromShardOfAfter(t *testing.T) {
	e, users := pendingOnShards(t, nil)
	if _, n, err := e.svc.RecoverAll(t.Context(), users[1], time.Minute, 100); err != nil || n != 2 {
		t.Fatalf("RecoverAll after the user on shard 7 = %d, %v; want the 2 chunks on shard 4095", n, err)
	}
	if diff := cmp.Diff([]bool{false, false, true}, doneUsers(t, e, users)); diff != "" {
		t.Errorf("users recovered (-want +got):\n%s", diff)
	}

	e, users = pendingOnShards(t, func(d *Deps) { d.IndexShards = 8 })
	if next, n, err := e.svc.RecoverAll(t.Context(), 0, time.Minute, 100); err != nil || n != 4 || next != 0 {
		t.Fatalf("RecoverAll over 8 shards = %d, %d, %v; want 0, 4, nil", next, n, err)
	}
	if diff := cmp.Diff([]bool{true, true, false}, doneUsers(t, e, users)); diff != "" {
		t.Errorf("users recovered over 8 shards (-want +got):\n%s", diff)
	}
	if next, n, err := e.svc.RecoverAll(t.Context(), users[2], time.Minute, 100); err != nil || n != 0 || next != 0 {
		t.Errorf("RecoverAll after a shard beyond IndexShards = %d, %d, %v; want the end", next, n, err)
	}
	if _, _, err := e.svc.RecoverAll(t.Context(), zen.ID(1<<63), time.Minute, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("after beyond MaxID: %v", err)
	}
	for _, bad := range []int{-1, zen.MaxShard + 2} {
		d := Deps{Primary: e.repl, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue, IndexShards: bad}
		if _, err := New(d, DefaultConfig()); err == nil {
			t.Errorf("New with IndexShards %d: no error", bad)
		}
	}
}

// pendingOnShards serves two chunks to each of three users on shards 0, 7 and 4095 while the
// queue is down (their materialize jobs are lost), then rebuilds the service two minutes
// later with mod applied to its Deps. Chunk c<k> of round r goes to users[k-1-3r].
func pendingOnShards(t *testing.T, mod func(*Deps)) (*env, []zen.ID) {
	t.Helper()
	now := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, nil)
	e.svc.now = clock
	users := []zen.ID{userOn(t, 0, 5), userOn(t, 7, 3), userOn(t, 4095, 9)}
	e.queue.err = errors.New("redis down")
	for range 2 {
		for _, u := range users {
			if _, err := e.svc.GetFeed(t.Context(), Request{User: u}); err != nil {
				t.Fatal(err)
			}
			e.svc.Wait()
		}
	}
	e.queue.err = nil
	if got := len(indexRows(t, e.primary)); got != 2*len(users) {
		t.Fatalf("%d pending index rows, want %d", got, 2*len(users))
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	e.rebuild(t, func(d *Deps) {
		d.Now = clock
		if mod != nil {
			mod(d)
		}
	})
	return e, users
}

// doneUsers reports, per user, whether both of its chunks are materialized.
func doneUsers(t *testing.T, e *env, users []zen.ID) []bool {
	t.Helper()
	out := make([]bool, len(users))
	for i, u := range users {
		out[i] = true
		for c := range 2 {
			st, err := e.svc.ChunkStatus(t.Context(), u, fmt.Sprintf("c%d", 1+i+c*len(users)))
			if err != nil {
				t.Fatal(err)
			}
			out[i] = out[i] && st == ChunkDone
		}
	}
	return out
}

// FeedRange holds every feed row of its user (pending chunks and items, any sequence) and no
// row of another user or of another kind: it is what the bench's Java reader scans in
// GetFeed's place.
func TestFeedRange(t *testing.T) {
	u := userOn(t, 7, 42)
	start, stop := FeedRange(u)
	in := func(k []byte) bool { return bytes.Compare(k, start) >= 0 && bytes.Compare(k, stop) < 0 }
	for _, k := range [][]byte{pendingKey(u, 0), pendingKey(u, 1<<63), itemKey(u, position{Seq: 1, Pos: 0}),
		itemKey(u, position{Seq: ^uint64(0), Pos: ^uint32(0)})} {
		if !in(k) {
			t.Errorf("feed row %x of the user is outside [%x, %x)", k, start, stop)
		}
	}
	for _, k := range [][]byte{pendingKey(u+1, 5), pendingKey(u-1, 5), userPrefix(prefixPin, u), userPrefix(prefixCounter, u),
		userPrefix(prefixDone, u)} {
		if in(k) {
			t.Errorf("row %x (another user's or kind's) is inside [%x, %x)", k, start, stop)
		}
	}
	if got := PageScanRows(50); got != 58 {
		t.Errorf("PageScanRows(50) = %d, want 58", got)
	}
}

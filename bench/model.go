// Package bench is SmartFeed's end-to-end benchmark harness (smartfeed bench): a deterministic
// social-network workload after Stream-Framework-Bench's social model, driven through the real
// system (events through pinlater into the worker, GetFeed over loopback gRPC), with the peers
// measured in the same run on the same events and reads: a Mastodon-style Redis home feed and
// the store's own batched-write limit. It writes results.json (with a "ratios" object),
// report.md and plots.
//
// The package drives the system through the System interface only; cmd/smartfeed wires it to
// the real services, so internal changes do not break the harness.
package bench

import (
	"math/rand/v2"
	"slices"
)

// Model is the social model: users in percentile buckets with follower counts, posts and reads
// per day (Stream-Framework-Bench's benchmark/social_model.py), 10% of users active a day.
type Model struct {
	Users    int
	Seed     uint64
	Buckets  []Bucket
	Active   float64 // fraction of users active a day
	Follows  [][]int // Follows[u] = users u follows (indexes)
	Follower [][]int // Follower[u] = users following u
	Bucket   []int   // Bucket[u] = index into Buckets
}

// Bucket is a percentile slice of the users.
type Bucket struct {
	Share     float64 // fraction of users
	Followers int     // followers of each user of the bucket (capped at Users-1)
	Posts     int     // posts per day
	Reads     int     // feed pages read per day
}

// Buckets returns the social model's buckets for n users: followers 5 (50% of users), 50,
// 100, 5% of the network capped at 1,000, and for the top 2% 10% of the network with a minimum
// of 1,000; posts per day 0/1/5/10/25 and reads 1/5/10/20/50 by the same buckets.
func Buckets(n int) []Bucket {
	return []Bucket{
		{Share: 0.50, Followers: 5, Posts: 0, Reads: 1},
		{Share: 0.25, Followers: 50, Posts: 1, Reads: 5},
		{Share: 0.15, Followers: 100, Posts: 5, Reads: 10},
		{Share: 0.08, Followers: min(n*5/100, 1000), Posts: 10, Reads: 20},
		{Share: 0.02, Followers: max(n/10, 1000), Posts: 25, Reads: 50},
	}
}

// NewModel draws the graph of n users deterministically from seed: each user's followers are
// drawn uniformly from the others, so the in-degree (followers) follows the buckets exactly and
// the out-degree is spread. It holds every edge in memory (Follows, Follower); NewModelSpec
// draws the same graph one user at a time.
func NewModel(n int, seed uint64) *Model {
	m := NewModelSpec(n, seed, 0)
	follows, follower := make([][]int, n), make([][]int, n)
	for u := range n {
		follower[u] = m.FollowersOf(u)
		for _, f := range follower[u] {
			follows[f] = append(follows[f], u)
		}
	}
	m.Follows, m.Follower = follows, follower
	return m
}

// NewModelSpec is the model of n users without its edges in memory: the buckets are assigned,
// and FollowersOf draws each user's followers when asked, the same ones NewModel holds. A
// positive maxFollowers caps every bucket's follower count (0: the model's counts), for a network
// whose top bucket (10% of the network each) would not fit.
func NewModelSpec(n int, seed uint64, maxFollowers int) *Model {
	m := &Model{Users: n, Seed: seed, Buckets: Buckets(n), Active: 0.10, Bucket: make([]int, n)}
	if maxFollowers > 0 {
		for i := range m.Buckets {
			m.Buckets[i].Followers = min(m.Buckets[i].Followers, maxFollowers)
		}
	}
	r := rand.New(rand.NewPCG(seed, 0x50c1a1))
	order := r.Perm(n) // which users land in which bucket
	at := 0
	for b, bk := range m.Buckets {
		cnt := int(bk.Share*float64(n) + 0.5)
		if b == len(m.Buckets)-1 {
			cnt = n - at
		}
		for _, u := range order[at:min(n, at+cnt)] {
			m.Bucket[u] = b
		}
		at = min(n, at+cnt)
	}
	return m
}

// FollowersOf returns the followers of user u in increasing order: Follower[u] when the model
// holds its edges, else drawn from the model's seed and u alone (uniformly among the other
// users, as many as u's bucket says), so a loader can stream the graph in any order.
func (m *Model) FollowersOf(u int) []int {
	if m.Follower != nil {
		return m.Follower[u]
	}
	n := m.Users
	k := min(m.Buckets[m.Bucket[u]].Followers, n-1)
	r := rand.New(rand.NewPCG(m.Seed^0x5eed_f011, uint64(u)))
	out := make([]int, 0, k)
	if 2*k > n { // dense: pick the ones left out instead
		skip := map[int]bool{u: true}
		for len(skip) < n-k {
			skip[r.IntN(n)] = true
		}
		for f := range n {
			if !skip[f] {
				out = append(out, f)
			}
		}
		return out
	}
	seen := make(map[int]bool, k+1)
	seen[u] = true
	for len(out) < k {
		f := r.IntN(n)
		if seen[f] {
			continue
		}
		seen[f] = true
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// Edges is the number of follow edges.
func (m *Model) Edges() int {
	n := 0
	for u := range m.Users {
		n += min(m.Buckets[m.Bucket[u]].Followers, m.Users-1)
	}
	return n
}

// Authors returns n post authors drawn from the day's active users weighted by their bucket's
// posts per day: the events of the run, deterministic for the model's seed and salt.
func (m *Model) Authors(n int, salt uint64) []int {
	r := rand.New(rand.NewPCG(m.Seed, salt))
	var pool []int // an author repeated once per post of the day
	for u := range m.Users {
		if r.Float64() >= m.Active {
			continue
		}
		for range m.Buckets[m.Bucket[u]].Posts {
			pool = append(pool, u)
		}
	}
	if len(pool) == 0 {
		pool = []int{0}
	}
	out := make([]int, n)
	for i := range out {
		out[i] = pool[r.IntN(len(pool))]
	}
	return out
}

// Readers returns n feed readers weighted by their bucket's reads per day.
func (m *Model) Readers(n int, salt uint64) []int {
	r := rand.New(rand.NewPCG(m.Seed, salt))
	var pool []int
	for u := range m.Users {
		if r.Float64() >= m.Active {
			continue
		}
		for range m.Buckets[m.Bucket[u]].Reads {
			pool = append(pool, u)
		}
	}
	if len(pool) == 0 {
		pool = []int{0}
	}
	out := make([]int, n)
	for i := range out {
		out[i] = pool[r.IntN(len(pool))]
	}
	return out
}

// ActiveUsers returns the users active on one day: each with probability Active, drawn from the
// model's seed and salt (at least one user).
func (m *Model) ActiveUsers(salt uint64) []int {
	r := rand.New(rand.NewPCG(m.Seed, salt))
	var out []int
	for u := range m.Users {
		if r.Float64() < m.Active {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		out = []int{0}
	}
	return out
}

package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// BenchmarkFanoutEngagement is BenchmarkFanout's pebble-nosync case without an engagement
// store, and with one whose online features the fanout reads for every receiver (one batched
// read per page of receivers):
//
//   - without: no engagement store;
//   - online-off: an engagement store with Options.NoOnlineFeatures (no profile reads);
//   - with: every receiver's profile absent, as for users who never engaged;
//   - with-profiles-10pct, with-profiles-all: one receiver in ten, or all of them, has a
//     profile of benchAffinities affinities (one of them for the following source, so the
//     scores change) and 4 hidden authors, the size of an active user's.
func BenchmarkFanoutEngagement(b *testing.B) {
	n := benchFollowers(b)
	b.Run("without", func(b *testing.B) { benchWorker(b, n, openPebble(b, zenpebble.WithNoSync())) })
	cases := []struct {
		name      string
		noOnline  bool
		profileOf int // every profileOf-th receiver has a profile; 0: none
	}{
		{"online-off", true, 0},
		{"with", false, 0},
		{"with-profiles-10pct", false, 10},
		{"with-profiles-all", false, 1},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := openPebble(b, zenpebble.WithNoSync())
			t, err := s.Table(context.Background(), engagement.Table)
			if err != nil {
				b.Fatal(err)
			}
			if c.profileOf > 0 {
				writeBenchProfiles(b, t, benchReceivers(n), c.profileOf)
			}
			benchWorker(b, n, s, func(o *Options) {
				o.Engagement, o.NoOnlineFeatures = engagement.NewStore(t, 0, nil), c.noOnline
			})
		})
	}
}

// benchAffinities is the number of affinities of a benchmark profile.
const benchAffinities = 128

// writeBenchProfiles writes the profile row (engagement.Table's user|'p', JSON) of every
// every-th receiver: benchAffinities affinities of every kind, the first for the following
// source, and 4 hidden authors.
func writeBenchProfiles(b *testing.B, t zen.Table, users []zen.ID, every int) {
	b.Helper()
	var muts []zen.Mutation
	for i := 0; i < len(users); i += every {
		var p engagement.Profile
		kinds := []engagement.Kind{engagement.KindAuthor, engagement.KindBoard, engagement.KindInterest, engagement.KindSource}
		for j := range benchAffinities {
			kind, id := kinds[j%len(kinds)], uint64(j+100)
			if j == 0 {
				kind, id = engagement.KindSource, uint64(zen.SourceFollowing)
			}
			p.Affinities = append(p.Affinities, engagement.AffinityEntry{Kind: kind, ID: id,
				V: 0.5 + float64(j%7)/3, T: 1_767_000_000_000 + int64(j)*3_600_000})
		}
		p.HiddenAuthors = []uint64{11, 12, 13, 14}
		v, err := json.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		k := binary.BigEndian.AppendUint64(nil, uint64(users[i]))
		muts = append(muts, zen.Mutation{Key: append(k, 'p'), Value: v})
	}
	if err := t.Apply(context.Background(), muts); err != nil {
		b.Fatal(err)
	}
}

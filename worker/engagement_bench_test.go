package worker

import (
	"context"
	"testing"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// BenchmarkFanoutEngagement is BenchmarkFanout's pebble-nosync case without and with an
// engagement store: the cost of reading every receiver's profile (one batched read per page of
// receivers, all absent here, as for users who never engaged).
func BenchmarkFanoutEngagement(b *testing.B) {
	n := benchFollowers(b)
	b.Run("without", func(b *testing.B) { benchWorker(b, n, openPebble(b, zenpebble.WithNoSync())) })
	b.Run("with", func(b *testing.B) {
		s := openPebble(b, zenpebble.WithNoSync())
		t, err := s.Table(context.Background(), engagement.Table)
		if err != nil {
			b.Fatal(err)
		}
		benchWorker(b, n, s, func(o *Options) { o.Engagement = engagement.NewStore(t, 0, nil) })
	})
}

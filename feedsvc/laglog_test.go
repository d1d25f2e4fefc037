package feedsvc

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLagLogSince(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	type want struct {
		lags          []time.Duration
		next, dropped uint64
	}
	for _, tc := range []struct {
		name  string
		added []time.Duration
		from  uint64
		want  want
	}{
		{"empty", nil, 0, want{lags: []time.Duration{}}},
		{"all", ms(1, 2, 3), 0, want{ms(1, 2, 3), 3, 0}},
		{"from the middle", ms(1, 2, 3), 2, want{ms(3), 3, 0}},
		{"nothing new", ms(1, 2, 3), 3, want{[]time.Duration{}, 3, 0}},
		{"from beyond the end", ms(1, 2), 7, want{[]time.Duration{}, 2, 0}},
		{"wrapped: the oldest dropped", ms(1, 2, 3, 4, 5, 6), 0, want{ms(3, 4, 5, 6), 6, 2}},
		{"wrapped, read on from a kept one", ms(1, 2, 3, 4, 5, 6), 4, want{ms(5, 6), 6, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLagLog(4)
			l.add(tc.added...)
			var got want
			got.lags, got.next, got.dropped = l.Since(tc.from)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("Since(%d) (-want +got):\n%s", tc.from, diff)
			}
			// Latest(2): the last two still kept.
			wantLatest := tc.added[max(0, len(tc.added)-2):]
			if wantLatest == nil {
				wantLatest = []time.Duration{}
			}
			if diff := cmp.Diff(wantLatest, l.Latest(2)); diff != "" {
				t.Errorf("Latest(2) (-want +got):\n%s", diff)
			}
		})
	}
}

package zenhbase

import (
	"encoding/binary"
	"testing"
)

// TestIncrementSentTwiceAppliesOnce sends one increment twice, as gohbase does when its region
// server's connection fails after the server applied the call but before the answer arrived
// (a region server killed, the call retried on the server that reopened the region): the
// counter moves by the delta once, and both sends answer its value.
func TestIncrementSentTwiceAppliesOnce(t *testing.T) {
	s := openStore(t, Options{})
	tb := freshTable(t, s).(*Table)
	ctx := t.Context()
	key := []byte("counter")
	if _, err := tb.Increment(ctx, key, 2); err != nil {
		t.Fatal(err)
	}
	call, err := tb.newIncrement(ctx, key, 5)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for range 2 {
		n, err := tb.sendIncrement(call)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	v, err := tb.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if n := int64(binary.BigEndian.Uint64(v)); n != 7 || got[0] != 7 || got[1] != 7 {
		t.Errorf("counter at 2, one increment of 5 sent twice: stored %d, answers %v; want 7, [7 7]", n, got)
	}
}

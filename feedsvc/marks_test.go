package feedsvc

import (
	"testing"

	"github.com/smartfeed/smartfeed/zen"
)

// userMarks keeps the last mark of each user, forgets one on request, and forgets all at once
// when max users are marked; forgetting keeps the count right, so the bound is not hit early.
func TestUserMarks(t *testing.T) {
	u := userMarks{max: 3}
	id := func(n uint64) zen.ID { return userID(t, n) }
	u.set(id(1), 10)
	u.set(id(1), 11)
	u.set(id(2), 20)
	if at, ok := u.get(id(1)); !ok || at != 11 {
		t.Fatalf("get(1) = %d, %v; want 11, true", at, ok)
	}
	u.forget(id(2))
	u.forget(id(2))
	u.set(id(3), 30)
	if n := u.n.Load(); n != 2 {
		t.Fatalf("count %d after marks of 1 and 3, want 2", n)
	}
	u.set(id(4), 40) // three marked now, under the bound of 3 when set
	if _, ok := u.get(id(1)); !ok {
		t.Fatal("mark of 1 dropped before the bound was reached")
	}
	u.set(id(5), 50) // at the bound: all forgotten, then 5 marked
	for _, n := range []uint64{1, 3, 4} {
		if _, ok := u.get(id(n)); ok {
			t.Errorf("mark of %d kept past the bound", n)
		}
	}
	if at, ok := u.get(id(5)); !ok || at != 50 {
		t.Errorf("get(5) = %d, %v; want 50, true", at, ok)
	}
}

package feedsvc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

// rowsOf returns how many rows of tb belong to user: per-user rows (user first) and pending-index
// rows (shard base | 'q' | user).
func rowsOf(t *testing.T, tb zen.Table, user zen.ID) int {
	t.Helper()
	rows, err := tb.Scan(t.Context(), zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := binary.BigEndian.AppendUint64(nil, uint64(user))
	n := 0
	for _, r := range rows {
		if bytes.HasPrefix(r.Key, u) || (len(r.Key) == indexKeyLen && bytes.Equal(r.Key[9:17], u)) {
			n++
		}
	}
	return n
}

// TestDeleteFeed: a deleted user's feed goes from both stores, pending chunk and index included,
// while another user's feed on the same shard is untouched; running it again changes nothing.
func TestDeleteFeed(t *testing.T) {
	e := newEnv(t, nil)
	gone, kept := userOn(t, 5, 1), userOn(t, 5, 2)
	for _, u := range []zen.ID{gone, kept} {
		e.user = u
		e.get(t, "", 10)
		e.svc.Wait()
		e.materialize(t)
		e.get(t, "", 10) // a second chunk, left pending
		e.svc.Wait()
	}
	e.flush(t)
	e.user = kept
	keptFeed := e.all(t, 4)
	if rowsOf(t, e.primary, gone) == 0 || len(keptFeed) == 0 {
		t.Fatalf("setup: %d rows of the deleted user, %d items of the kept one", rowsOf(t, e.primary, gone), len(keptFeed))
	}
	keptRows := rowsOf(t, e.primary, kept)

	for range 2 { // idempotent
		if err := e.svc.DeleteFeed(t.Context(), gone); err != nil {
			t.Fatal(err)
		}
	}
	e.flush(t)
	for name, tb := range map[string]zen.Table{"primary": e.primary, "standby": e.standby} {
		if n := rowsOf(t, tb, gone); n != 0 {
			t.Errorf("%s: %d rows of the deleted user remain", name, n)
		}
	}
	if n := rowsOf(t, e.primary, kept); n != keptRows {
		t.Errorf("rows of the other user: %d, want %d", n, keptRows)
	}
	e.gen.err = errGen // serve the stored feed only
	if diff := cmp.Diff(keptFeed, e.all(t, 4)); diff != "" {
		t.Errorf("other user's feed changed (-want +got):\n%s", diff)
	}
	if err := e.svc.DeleteFeed(t.Context(), pinID(1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("DeleteFeed(pin id) = %v, want ErrInvalid", err)
	}
}

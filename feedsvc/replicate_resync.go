package feedsvc

import (
	"bytes"
	"context"
	"fmt"

	"github.com/smartfeed/smartfeed/zen"
)

// Repairs: queueing rows for copying, or copying a user's rows at once.

// ResyncAll queues every row of the primary and of the standby for copying, through the change
// log: the repair for a standby that was rebuilt or that missed writes. It writes the entries
// only; a running Replicator (or the next one to start) applies them. progress, if set, is
// called with the rows queued so far. It returns the number of rows queued.
func ResyncAll(ctx context.Context, primary, standby zen.Table, progress func(n int)) (int, error) {
	r := &Replicator{primary: primary}
	total := 0
	for _, src := range []struct {
		name string
		t    zen.Table
	}{{"primary", primary}, {"standby", standby}} {
		var start []byte
		for {
			rows, err := src.t.Scan(ctx, zen.ScanOptions{Start: start, Stop: logPrefix, Limit: 1000})
			if err != nil {
				return total, fmt.Errorf("resync: scan %s: %w", src.name, err)
			}
			if len(rows) == 0 {
				break
			}
			keys := make([][]byte, len(rows))
			for i, kv := range rows {
				keys[i] = kv.Key
			}
			if err := primary.Apply(ctx, []zen.Mutation{{Key: logKey(r.nextSeq()), Value: encodeEntry(entryCommitted, keys)}}); err != nil {
				return total, fmt.Errorf("resync: queue: %w", err)
			}
			total += len(rows)
			if progress != nil {
				progress(total)
			}
			start = append(bytes.Clone(rows[len(rows)-1].Key), 0)
		}
	}
	return total, nil
}

// Resync copies user's rows from the primary to the standby and deletes the standby's rows the
// primary lacks: the repair after dropped writes or a crash with writes still queued. It
// returns the number of standby rows changed.
func Resync(ctx context.Context, primary, standby zen.Table, user zen.ID) (int, error) {
	changed := 0
	for _, p := range []byte{prefixFeed, prefixPin, prefixCounter, prefixDone} {
		start := userPrefix(p, user)
		o := zen.ScanOptions{Start: start, Stop: zen.PrefixEnd(start)}
		src, err := primary.Scan(ctx, o)
		if err != nil {
			return changed, fmt.Errorf("resync %d: scan primary: %w", user, err)
		}
		dst, err := standby.Scan(ctx, o)
		if err != nil {
			return changed, fmt.Errorf("resync %d: scan standby: %w", user, err)
		}
		have := make(map[string][]byte, len(dst))
		for _, kv := range dst {
			have[string(kv.Key)] = kv.Value
		}
		var muts []zen.Mutation
		for _, kv := range src {
			if v, ok := have[string(kv.Key)]; !ok || !bytes.Equal(v, kv.Value) {
				muts = append(muts, zen.Mutation{Key: kv.Key, Value: kv.Value})
			}
			delete(have, string(kv.Key))
		}
		for k := range have {
			muts = append(muts, zen.Mutation{Key: []byte(k), Delete: true})
		}
		if len(muts) == 0 {
			continue
		}
		if err := standby.Apply(ctx, muts); err != nil {
			return changed, fmt.Errorf("resync %d: %w", user, err)
		}
		changed += len(muts)
	}
	return changed, nil
}

package feedsvc

import (
	"testing"
	"time"
)

// BenchmarkRecoverAllNothingDue measures a recovery pass with nothing to recover: one user with a
// materialized feed of 200 items and a pending chunk younger than olderThan (a prepared chunk
// waiting for the user's next visit looks the same), over 8 index shards.
func BenchmarkRecoverAllNothingDue(b *testing.B) {
	e := newEnv(b, nil)
	for range 40 {
		e.get(b, "", 1)
		e.svc.Wait()
		e.materialize(b)
	}
	e.get(b, "", 1)
	e.svc.Wait()
	svc, err := New(Deps{Primary: e.repl, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue, IndexShards: 8}, e.svc.Config())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, n, err := svc.RecoverAll(b.Context(), 0, time.Hour, 500); err != nil || n != 0 {
			b.Fatalf("RecoverAll: %d, %v", n, err)
		}
	}
}

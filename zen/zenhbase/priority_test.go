package zenhbase

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tsuna/gohbase/hrpc"
	"github.com/tsuna/gohbase/pb"
	"github.com/tsuna/gohbase/region"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// TestUrgentOptions: a call made with a context marked by zen.Urgently carries the store's
// urgent priority; one without the mark, with the mark taken off (zen.NotUrgently), or on a
// store whose urgent priority is off (-1) carries none.
func TestUrgentOptions(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		priority int // Options.UrgentPriority before defaults
		ctx      context.Context
		want     uint32
	}{
		{"urgent, default", 0, zen.Urgently(ctx), DefaultUrgentPriority},
		{"urgent, set", 300, zen.Urgently(ctx), 300},
		{"not marked", 0, ctx, 0},
		{"mark taken off", 0, zen.NotUrgently(zen.Urgently(ctx)), 0},
		{"urgent, off", -1, zen.Urgently(ctx), 0},
		{"urgent and lazy", 0, zen.Lazily(zen.Urgently(ctx)), DefaultUrgentPriority},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{UrgentPriority: tc.priority}
			if err := o.defaults(); err != nil {
				t.Fatal(err)
			}
			tb := &Table{s: &Store{opts: o}, name: []byte("t"), fam: "f"}
			get, err := hrpc.NewGet(tc.ctx, tb.name, []byte("k"), tb.opts(tc.ctx)...)
			if err != nil {
				t.Fatal(err)
			}
			put, err := hrpc.NewPut(tc.ctx, tb.name, []byte("k"), map[string]map[string][]byte{"f": {"v": {1}}}, tb.opts(tc.ctx)...)
			if err != nil {
				t.Fatal(err)
			}
			scan, err := hrpc.NewScanRange(tc.ctx, tb.name, nil, nil, tb.opts(tc.ctx)...)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []hrpc.Prioritized{get, put, scan} {
				if got := c.Priority(); got != tc.want {
					t.Errorf("%T: priority %d, want %d", c, got, tc.want)
				}
			}
		})
	}
	if _, err := Open(ctx, "127.0.0.1:1", Options{UrgentPriority: 1 << 16}); err == nil {
		t.Error("Open with an urgent priority of 65536 succeeded")
	}
}

// TestPriorityOnTheWire reads what the patched gohbase's region client writes to a region
// server: the RequestHeader of a call with a priority carries it, one without carries none, and
// a multi request carries the highest priority of the calls batched in it.
func TestPriorityOnTheWire(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type seen struct {
		Method   string
		Priority uint32 // 0: not set
	}
	headers := make(chan seen, 16)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		var hello [10]byte // "HBas", version, auth, length of the connection header
		if _, err := io.ReadFull(r, hello[:]); err != nil {
			return
		}
		if _, err := r.Discard(int(binary.BigEndian.Uint32(hello[6:]))); err != nil {
			return
		}
		for {
			var n [4]byte
			if _, err := io.ReadFull(r, n[:]); err != nil {
				return
			}
			frame := make([]byte, binary.BigEndian.Uint32(n[:]))
			if _, err := io.ReadFull(r, frame); err != nil {
				return
			}
			hlen, k := protowire.ConsumeVarint(frame)
			if k < 0 {
				return
			}
			var h pb.RequestHeader
			if err := proto.Unmarshal(frame[k:k+int(hlen)], &h); err != nil {
				return
			}
			headers <- seen{h.GetMethodName(), h.GetPriority()}
		}
	}()

	// A long flush interval, so that calls queued together go out as one multi request.
	rc := region.NewClient(ln.Addr().String(), region.RegionClient, 100, 50*time.Millisecond, "test", time.Minute, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rc.Dial(ctx); err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	reg := region.NewInfo(0, nil, []byte("t"), []byte("t,,1.abc."), nil, nil)
	get := func(opts ...func(hrpc.Call) error) hrpc.Call {
		g, err := hrpc.NewGet(ctx, []byte("t"), []byte("k"), opts...)
		if err != nil {
			t.Fatal(err)
		}
		g.SetRegion(reg)
		return g
	}
	cas := func(p uint32) hrpc.Call {
		put, err := hrpc.NewPut(ctx, []byte("t"), []byte("k"), map[string]map[string][]byte{"f": {"v": {1}}}, hrpc.Priority(p))
		if err != nil {
			t.Fatal(err)
		}
		c, err := hrpc.NewCheckAndPut(put, "f", "v", nil)
		if err != nil {
			t.Fatal(err)
		}
		c.SetRegion(reg)
		return c
	}
	next := func() seen {
		t.Helper()
		select {
		case h := <-headers:
			return h
		case <-ctx.Done():
			t.Fatal("no request reached the server")
			return seen{}
		}
	}
	var got []seen
	// A compare-and-set skips the batching: sent as it is.
	rc.QueueRPC(cas(200))
	got = append(got, next())
	// Two Gets queued together, one urgent: one multi request, at the urgent one's priority.
	rc.QueueRPC(get())
	rc.QueueRPC(get(hrpc.Priority(200)))
	got = append(got, next())
	// Two Gets without a priority: a multi request without one.
	rc.QueueRPC(get())
	rc.QueueRPC(get())
	got = append(got, next())
	want := []seen{{"Mutate", 200}, {"Multi", 200}, {"Multi", 0}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("request headers (-want +got):\n%s", d)
	}
}

// TestUrgentCalls runs the randomized comparison with the model through a table whose every
// call is marked urgent: the region server takes the calls with a priority (on its priority
// handlers) and answers them as it answers the others, for every kind of call zen makes
// (Get, Scan, Apply, the compare-and-sets, Increment, GetMany, ScanMany, CheckAndSetMany).
func TestUrgentCalls(t *testing.T) {
	s := openStore(t, Options{})
	for _, seed := range zentest.Seeds(t, 2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			model, _ := zenmem.New().Table(t.Context(), "r")
			zentest.RunRandomized(t, model, urgentTable{freshTable(t, s).(*Table)}, seed, 400)
		})
	}
}

// urgentTable marks the context of every call urgent.
type urgentTable struct{ t *Table }

var (
	_ zen.MultiGetter  = urgentTable{}
	_ zen.MultiScanner = urgentTable{}
	_ zen.CondBatcher  = urgentTable{}
)

func (u urgentTable) Get(ctx context.Context, key []byte) ([]byte, error) {
	return u.t.Get(zen.Urgently(ctx), key)
}

func (u urgentTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	return u.t.Apply(zen.Urgently(ctx), muts)
}

func (u urgentTable) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	return u.t.Scan(zen.Urgently(ctx), o)
}

func (u urgentTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	return u.t.CheckAndSet(zen.Urgently(ctx), key, expected, value)
}

func (u urgentTable) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	return u.t.Increment(zen.Urgently(ctx), key, delta)
}

func (u urgentTable) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	return u.t.GetMany(zen.Urgently(ctx), keys)
}

func (u urgentTable) ScanMany(ctx context.Context, opts []zen.ScanOptions) ([][]zen.KV, error) {
	return u.t.ScanMany(zen.Urgently(ctx), opts)
}

func (u urgentTable) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	return u.t.CheckAndSetMany(zen.Urgently(ctx), conds)
}

// BenchmarkCASUnderLoad: a compare-and-set, urgent or not, while four writers keep the region
// server busy with batches of 500 rows (the fanout's shape). The two kinds alternate call by
// call on one store, so both meet the same load; each reports its mean (ns/op) and p99.
func BenchmarkCASUnderLoad(b *testing.B) {
	s := openStore(b, Options{FlushInterval: time.Millisecond})
	load, tb := freshTable(b, s), freshTable(b, s)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			val := make([]byte, 32)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				muts := make([]zen.Mutation, 500)
				for j := range muts {
					muts[j] = zen.Mutation{Key: benchKey(w<<24 | i*500 + j), Value: val}
				}
				if err := load.Apply(context.Background(), muts); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(2 * time.Second) // the load under way
	b.ResetTimer()
	var took [2][]time.Duration
	for i := range b.N {
		for kind, ctx := range []context.Context{context.Background(), zen.Urgently(context.Background())} {
			start := time.Now()
			if _, err := tb.CheckAndSet(ctx, benchKey(i*2+kind), nil, []byte("v")); err != nil {
				b.Fatal(err)
			}
			took[kind] = append(took[kind], time.Since(start))
		}
	}
	b.StopTimer()
	for kind, name := range []string{"normal", "urgent"} {
		d := took[kind]
		slices.Sort(d)
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		b.ReportMetric(float64(sum.Microseconds())/float64(len(d)), name+"-mean-µs")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), name+"-p99-µs")
	}
}

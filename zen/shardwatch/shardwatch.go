// Package shardwatch keeps a process's shard map live, as the seeds push their shard
// configuration from ZooKeeper: it loads the map from a file or a ZooKeeper znode, watches it,
// and hands every valid new map to a setter (zen.Graph.SetShards) that swaps it atomically. A bad
// map (gaps, overlaps, an unknown store, bad JSON) is refused with one log line and a metric,
// and the map in use is kept.
package shardwatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// Options configures a Watcher.
type Options struct {
	// KnownStores are the store names this process can reach; a map naming another is refused.
	// Empty means any name.
	KnownStores []string
	Logger      *zap.Logger
	// Registerer receives smartfeed_shardmap_updates_total{source,result} and
	// smartfeed_shardmap_ranges; nil registers nothing.
	Registerer prometheus.Registerer
	// AckID, when set, makes WatchZK acknowledge every version of the znode it has handled: an
	// ephemeral znode AckPath(zpath)/AckID holds the version and whether the map was applied,
	// written once the setter has returned. A publisher waits for them with WaitAcks. AckID must
	// be unique per process; empty acknowledges nothing.
	AckID string
	// Lease, when set, is extended by WatchZK while the map this process routes by is confirmed
	// current (see WatchZK); the router refuses shard-keyed writes while it has lapsed
	// (zenroute.Lease). Set it together with AckID.
	Lease Lease
}

// Lease is what WatchZK extends while the map in use is confirmed current (zenroute.Lease).
type Lease interface {
	// Extend makes the lease valid until the given time (from time.Now: monotonic).
	Extend(until time.Time)
}

// Watcher validates offered shard maps and passes the good ones on. It is safe for concurrent use.
type Watcher struct {
	set     func(*zen.ShardMap)
	known   []string
	ackID   string
	lease   Lease
	log     *zap.Logger
	updates *prometheus.CounterVec
	ranges  prometheus.Gauge

	mu  sync.Mutex
	cur *zen.ShardMap
	raw []byte
}

// New returns a Watcher that calls set with every accepted map.
func New(set func(*zen.ShardMap), o Options) (*Watcher, error) {
	if set == nil {
		return nil, errors.New("shardwatch: nil setter")
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if strings.ContainsAny(o.AckID, "/") {
		return nil, fmt.Errorf("shardwatch: ack id %q has a slash", o.AckID)
	}
	f := promauto.With(o.Registerer)
	w := &Watcher{set: set, known: o.KnownStores, log: o.Logger, ackID: o.AckID, lease: o.Lease,
		updates: f.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_shardmap_updates_total",
			Help: "Shard maps offered by a source: applied, unchanged or refused (the map in use is kept)."},
			[]string{"source", "result"}),
		ranges: f.NewGauge(prometheus.GaugeOpts{
			Name: "smartfeed_shardmap_ranges", Help: "Ranges in the shard map in use."}),
	}
	return w, nil
}

// Current returns the last accepted map (nil before the first).
func (w *Watcher) Current() *zen.ShardMap {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// Offer parses and validates a map from source ("file", "zookeeper") and, when it is good and
// differs from the one in use, swaps it in. A refused map returns the reason and changes nothing.
func (w *Watcher) Offer(source string, b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.raw != nil && bytes.Equal(w.raw, b) {
		w.updates.WithLabelValues(source, "unchanged").Inc()
		return nil
	}
	m, err := zen.ParseShardMap(b)
	if err == nil {
		err = m.CheckComplete()
	}
	if err == nil && len(w.known) > 0 {
		err = m.CheckStores(w.known...)
	}
	if err != nil {
		w.updates.WithLabelValues(source, "refused").Inc()
		w.log.Error("shard map refused; the map in use is kept", zap.String("source", source), zap.Error(err))
		return err
	}
	w.raw = bytes.Clone(b)
	if w.cur != nil && w.cur.Equal(m) {
		w.updates.WithLabelValues(source, "unchanged").Inc()
		return nil
	}
	w.cur = m
	w.set(m)
	w.ranges.Set(float64(len(m.Ranges())))
	w.updates.WithLabelValues(source, "applied").Inc()
	w.log.Info("shard map applied", zap.String("source", source), zap.Int("ranges", len(m.Ranges())),
		zap.Int("open_shards", len(m.OpenShards())))
	return nil
}

// LoadFile offers the map in the file at p once.
func (w *Watcher) LoadFile(p string) error {
	b, err := os.ReadFile(p)
	if err != nil {
		w.updates.WithLabelValues("file", "refused").Inc()
		return fmt.Errorf("shard map file: %w", err)
	}
	return w.Offer("file", b)
}

// WatchFile offers the file's map whenever its contents change, checking every interval, until
// ctx is done. Read errors and bad maps are logged (once per distinct error) and skipped.
func (w *Watcher) WatchFile(ctx context.Context, p string, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := w.LoadFile(p); err != nil {
			if err.Error() != last {
				w.log.Warn("shard map file", zap.String("path", p), zap.Error(err))
			}
			last = err.Error()
			continue
		}
		last = ""
	}
}

// zapPrintf routes go-zookeeper's log lines into zap at debug level. With timeoutMs set it also
// records the session timeout the server granted, which go-zookeeper reports only in its
// "authenticated" line (the smallest one seen, should a new session get another).
type zapPrintf struct {
	log       *zap.Logger
	timeoutMs *atomic.Int64
}

// authenticatedFormat is go-zookeeper's log line for an established session (v1.0.2).
const authenticatedFormat = "authenticated: id=%d, timeout=%d"

func (z zapPrintf) Printf(format string, args ...any) {
	if z.timeoutMs != nil && format == authenticatedFormat && len(args) == 2 {
		if ms, ok := args[1].(int32); ok && ms > 0 {
			for {
				cur := z.timeoutMs.Load()
				if (cur != 0 && cur <= int64(ms)) || z.timeoutMs.CompareAndSwap(cur, int64(ms)) {
					break
				}
			}
		}
	}
	z.log.Debug(fmt.Sprintf(format, args...))
}

// sessionTimeout is the ZooKeeper session timeout processes ask for.
const sessionTimeout = 10 * time.Second

// connect opens a ZooKeeper session on a comma-separated quorum; timeoutMs, when set, receives
// the session timeout the server granted.
func connect(quorum string, log *zap.Logger, timeoutMs ...*atomic.Int64) (*zk.Conn, error) {
	servers := strings.Split(quorum, ",")
	lp := zapPrintf{log: log}
	if len(timeoutMs) > 0 {
		lp.timeoutMs = timeoutMs[0]
	}
	conn, _, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(lp))
	if err != nil {
		return nil, fmt.Errorf("zookeeper %s: %w", quorum, err)
	}
	return conn, nil
}

// Versions of the znode WatchZK has handled, besides a znode's modification zxid.
const (
	handledNone   = -2 // nothing handled yet in this WatchZK
	handledNoNode = -1 // the znode does not exist
)

// leaseFor is the length of the lease a confirmation grants under a session timeout: half of
// it, counted from when the confirming request was sent. The server expires a session no sooner
// than a timeout after it last heard from the client, and a mover stops waiting for a process
// only then; half leaves room for clocks that run at slightly different rates.
func leaseFor(timeoutMs int64) time.Duration { return time.Duration(timeoutMs) * time.Millisecond / 2 }

// WatchZK offers the map stored in the znode at zpath of the ZooKeeper quorum ("host:port,…")
// now and on every change, until ctx is done. A missing znode is waited for; a deleted one
// keeps the map in use.
//
// With Options.Lease set, it also confirms, several times per lease, that the version this
// process handled (applied or refused, and acknowledged) is still the znode's current one: a
// round trip to ZooKeeper sent at time s that finds it extends the lease to s plus half the
// session timeout. A round trip that finds a newer version makes the watch read it at once, and
// extends nothing until it is handled. So a process that stalls, or loses its session, has a
// lapsed lease by the time a mover could have given up waiting for it, and writes nothing by
// its old map when it runs again.
func (w *Watcher) WatchZK(ctx context.Context, quorum, zpath string) error {
	var timeoutMs atomic.Int64
	conn, err := connect(quorum, w.log, &timeoutMs)
	if err != nil {
		return err
	}
	defer conn.Close()
	var handled atomic.Int64
	handled.Store(handledNone)
	nudge := make(chan struct{}, 1) // the heartbeat saw a version not handled yet
	beat := make(chan struct{}, 1)  // a version was handled: confirm it now
	if w.lease != nil {
		hctx, hcancel := context.WithCancel(ctx)
		var hwg sync.WaitGroup
		hwg.Go(func() { w.heartbeat(hctx, conn, zpath, &timeoutMs, &handled, nudge, beat) })
		defer func() { hcancel(); hwg.Wait() }()
	}
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		data, stat, ch, err := conn.GetW(zpath)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, ch, err = conn.ExistsW(zpath)
			if err == nil && ok {
				continue // created in between
			}
			if err == nil {
				handled.Store(handledNoNode)
				signal(beat)
			}
		} else if err == nil {
			oerr := w.Offer("zookeeper", data)
			if w.ackID != "" {
				if aerr := ack(conn, zpath, w.ackID, Ack{Version: stat.Version, Applied: oerr == nil, Stores: w.known}); aerr != nil {
					err = fmt.Errorf("acknowledge version %d: %w", stat.Version, aerr) // retried below
				}
			}
			if err == nil {
				handled.Store(stat.Mzxid)
				signal(beat)
			}
		}
		if err != nil {
			w.log.Warn("shard map znode", zap.String("path", zpath), zap.Error(err))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		select {
		case <-ctx.Done():
		case <-nudge:
		case ev := <-ch:
			if ev.Type == zk.EventNodeDeleted {
				w.log.Warn("shard map znode deleted; the map in use is kept", zap.String("path", zpath))
			}
		}
	}
	return ctx.Err()
}

// heartbeat confirms the handled version of the znode and extends the lease (see WatchZK),
// every fifth of a lease, and at once when beat fires.
func (w *Watcher) heartbeat(ctx context.Context, conn *zk.Conn, zpath string, timeoutMs, handled *atomic.Int64,
	nudge, beat chan struct{}) {
	type res struct {
		mzxid int64
		err   error
	}
	for {
		sent := time.Now()
		done := make(chan res, 1)
		go func() {
			ok, st, err := conn.Exists(zpath)
			switch {
			case err != nil:
				done <- res{err: err}
			case !ok:
				done <- res{mzxid: handledNoNode}
			default:
				done <- res{mzxid: st.Mzxid}
			}
		}()
		select {
		case <-ctx.Done():
			return
		case r := <-done:
			t := timeoutMs.Load()
			switch {
			case r.err != nil:
			case r.mzxid == handled.Load() && t > 0:
				w.lease.Extend(sent.Add(leaseFor(t)))
			case r.mzxid != handled.Load():
				select {
				case nudge <- struct{}{}:
				default:
				}
			}
		}
		every := time.Second
		if t := timeoutMs.Load(); t > 0 {
			every = leaseFor(t) / 5
		}
		select {
		case <-ctx.Done():
			return
		case <-beat:
		case <-time.After(every):
		}
	}
}

// LoadZK offers the map in the znode at zpath of the quorum once (a missing znode offers
// nothing), so a process starts routing by the map its peers use before it serves.
func (w *Watcher) LoadZK(ctx context.Context, quorum, zpath string) error {
	conn, err := connect(quorum, w.log)
	if err != nil {
		return err
	}
	defer conn.Close()
	type got struct {
		b   []byte
		err error
	}
	done := make(chan got, 1)
	go func() {
		b, _, err := conn.Get(zpath)
		done <- got{b, err}
	}()
	select {
	case <-ctx.Done():
		return fmt.Errorf("shard map znode %s: %w", zpath, ctx.Err())
	case g := <-done:
		if errors.Is(g.err, zk.ErrNoNode) {
			return nil
		}
		if g.err != nil {
			return fmt.Errorf("shard map znode %s: %w", zpath, g.err)
		}
		return w.Offer("zookeeper", g.b)
	}
}

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
	"path"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
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
}

// Watcher validates offered shard maps and passes the good ones on. It is safe for concurrent use.
type Watcher struct {
	set     func(*zen.ShardMap)
	known   []string
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
	w := &Watcher{set: set, known: o.KnownStores, log: o.Logger,
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_shardmap_updates_total",
			Help: "Shard maps offered by a source: applied, unchanged or refused (the map in use is kept)."},
			[]string{"source", "result"}),
		ranges: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "smartfeed_shardmap_ranges", Help: "Ranges in the shard map in use."}),
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{w.updates, w.ranges} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("shardwatch: register metrics: %w", err)
			}
		}
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

// zapPrintf routes go-zookeeper's log lines into zap at debug level.
type zapPrintf struct{ log *zap.Logger }

func (z zapPrintf) Printf(format string, args ...any) { z.log.Debug(fmt.Sprintf(format, args...)) }

// connect opens a ZooKeeper session on a comma-separated quorum.
func connect(quorum string, log *zap.Logger) (*zk.Conn, error) {
	servers := strings.Split(quorum, ",")
	conn, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(zapPrintf{log}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper %s: %w", quorum, err)
	}
	return conn, nil
}

// WatchZK offers the map stored in the znode at zpath of the ZooKeeper quorum ("host:port,…")
// now and on every change, until ctx is done. A missing znode is waited for; a deleted one
// keeps the map in use.
func (w *Watcher) WatchZK(ctx context.Context, quorum, zpath string) error {
	conn, err := connect(quorum, w.log)
	if err != nil {
		return err
	}
	defer conn.Close()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		data, _, ch, err := conn.GetW(zpath)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, ch, err = conn.ExistsW(zpath)
			if err == nil && ok {
				continue // created in between
			}
		} else if err == nil {
			_ = w.Offer("zookeeper", data)
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
		case ev := <-ch:
			if ev.Type == zk.EventNodeDeleted {
				w.log.Warn("shard map znode deleted; the map in use is kept", zap.String("path", zpath))
			}
		}
	}
	return ctx.Err()
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

// Publish validates m and writes it to the znode at zpath (creating it and its parents), the
// way an operator pushes a new shard map to every running process.
func Publish(ctx context.Context, quorum, zpath string, m *zen.ShardMap) error {
	b, err := m.MarshalJSON()
	if err != nil {
		return fmt.Errorf("publish shard map: %w", err)
	}
	conn, err := connect(quorum, zap.NewNop())
	if err != nil {
		return err
	}
	defer conn.Close()
	done := make(chan error, 1)
	go func() { done <- put(conn, zpath, b) }()
	select {
	case <-ctx.Done():
		return fmt.Errorf("publish shard map: %w", ctx.Err())
	case err := <-done:
		if err != nil {
			return fmt.Errorf("publish shard map to %s: %w", zpath, err)
		}
		return nil
	}
}

func put(conn *zk.Conn, zpath string, b []byte) error {
	acl := zk.WorldACL(zk.PermAll)
	// Parents first (persistent, empty).
	var parents []string
	for p := path.Dir(zpath); p != "/" && p != "."; p = path.Dir(p) {
		parents = append([]string{p}, parents...)
	}
	for _, p := range parents {
		if _, err := conn.Create(p, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	if _, err := conn.Create(zpath, b, 0, acl); err == nil {
		return nil
	} else if !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	_, err := conn.Set(zpath, b, -1)
	return err
}

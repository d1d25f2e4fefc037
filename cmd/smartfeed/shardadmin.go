package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shardv1 "github.com/smartfeed/smartfeed/proto/shard/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/shardwatch"
	"github.com/smartfeed/smartfeed/zen/zenmove"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// shardAckWait bounds how long a move waits for every process watching the ZooKeeper shard map
// to acknowledge a map it published (each acknowledges once the writes it started under the
// previous map have landed).
const shardAckWait = 15 * time.Second

// publishedMaps is the zenmove.Maps of a serving process: a map is written where the process's
// shard map comes from (the file, the znode), installed in the router here at once (waiting for
// the writes in flight), and handed to the watcher, which passes it to the graph. With
// ZooKeeper, Publish returns once every process watching the znode has acknowledged the map.
type publishedMaps struct {
	router     *zenroute.Store
	watch      *shardwatch.Watcher
	file       string
	zk, zkPath string
	log        *zap.Logger
}

// Current returns the router's map.
func (p *publishedMaps) Current() *zen.ShardMap { return p.router.Shards() }

// Publish writes m to the file and/or the znode, installs it here, and with ZooKeeper waits for
// every process's acknowledgement.
func (p *publishedMaps) Publish(ctx context.Context, m *zen.ShardMap) error {
	b, err := m.MarshalJSON()
	if err != nil {
		return fmt.Errorf("encode shard map: %w", err)
	}
	if p.file != "" {
		if err := writeFileAtomic(p.file, b); err != nil {
			return err
		}
	}
	var version int32
	if p.zk != "" {
		if err := shardwatch.CheckPeers(ctx, p.zk, p.zkPath, m); err != nil {
			return err
		}
		if version, err = shardwatch.PublishVersion(ctx, p.zk, p.zkPath, m); err != nil {
			return err
		}
	}
	if err := p.router.Swap(ctx, m); err != nil {
		return err
	}
	source := "file"
	if p.file == "" {
		source = "zookeeper"
	}
	if err := p.watch.Offer(source, b); err != nil {
		return fmt.Errorf("apply shard map: %w", err)
	}
	if p.zk != "" {
		actx, cancel := context.WithTimeout(ctx, shardAckWait)
		defer cancel()
		n, err := shardwatch.WaitAcks(actx, p.zk, p.zkPath, version)
		if err != nil {
			return err
		}
		p.log.Info("shard map acknowledged", zap.Int32("version", version), zap.Int("processes", n))
	}
	return nil
}

// writeFileAtomic replaces path with b through a temporary file in the same directory.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".shardmap-*")
	if err != nil {
		return fmt.Errorf("write shard map file: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(append(b, '\n'))
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write shard map file %s: %w", path, werr)
	}
	return nil
}

// noStoresMessage is why a process without extra stores moves no shards.
const noStoresMessage = "this process routes no shards: it was started without --stores, so it has no other store to move " +
	"shards to; start the process that holds the shards with --stores NAME=hbase:QUORUM or NAME=pebble:DIR " +
	"(and --shard-map-file or --shard-map-zk) and ask its admin gRPC port"

// noShardAdmin serves ShardAdmin in a process without extra stores: every call fails with
// FailedPrecondition naming --stores.
type noShardAdmin struct {
	shardv1.UnimplementedShardAdminServer
}

// MoveShards refuses: nothing is routed here.
func (noShardAdmin) MoveShards(*shardv1.MoveShardsRequest, shardv1.ShardAdmin_MoveShardsServer) error {
	return status.Error(codes.FailedPrecondition, noStoresMessage)
}

// shardAdmin serves ShardAdmin: one move at a time, run by this process's mover.
type shardAdmin struct {
	shardv1.UnimplementedShardAdminServer
	mover *zenmove.Mover
	// refuse is why moves are refused ("" when the map is persisted: file or znode).
	refuse string
	log    *zap.Logger
	mu     sync.Mutex
	// recovering is set while the startup recovery (recoverMove) holds mu or is about to take
	// it: a move asked for then waits for it, instead of being refused as if another move ran.
	recovering atomic.Bool
}

// newShardAdmin builds the mover over the router's stores, keeping its progress row in the
// main store's meta table.
func (a *app) newShardAdmin() (*shardAdmin, error) {
	backs := map[string]zen.Store{}
	for _, n := range a.router.StoreNames() {
		backs[n], _ = a.router.Backend(n)
	}
	meta, err := a.stores.table(context.Background(), storeMain, tableMeta)
	if err != nil {
		return nil, err
	}
	sa := &shardAdmin{log: a.log.Named("shardmove")}
	var maps zenmove.Maps = &zenmove.Local{Router: a.router, Setters: []func(*zen.ShardMap){a.graph.SetShards}}
	if a.shardWatch == nil {
		sa.refuse = "the shard map is not persisted: start the process with --shard-map-file or --shard-map-zk, " +
			"so the switched map outlives a restart"
	} else {
		sm := a.cfg.Storage.ShardMap
		maps = &publishedMaps{router: a.router, watch: a.shardWatch, file: sm.File, zk: sm.ZK, zkPath: sm.ZKPath, log: sa.log}
	}
	if sa.mover, err = zenmove.New(backs, maps, zenmove.Options{State: meta, Logger: sa.log, Registerer: a.reg}); err != nil {
		return nil, err
	}
	return sa, nil
}

// recoverMove lifts the fence of a move that crashed while fenced (see zenmove.Mover.Recover),
// retrying while ctx lasts, since the map's source may not answer yet.
func (s *shardAdmin) recoverMove(ctx context.Context) {
	s.recovering.Store(true)
	if !s.mu.TryLock() { // a move runs: it deals with the unfinished state itself
		s.recovering.Store(false)
		return
	}
	defer func() {
		// Unlock first: a move that finds the lock taken and recovering unset is refused, so
		// the flag must not drop while the recovery still holds the lock.
		s.mu.Unlock()
		s.recovering.Store(false)
	}()
	for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
		p, lifted, err := s.mover.Recover(ctx)
		if err == nil {
			if p != nil {
				s.log.Warn("an unfinished shard move is waiting for its rerun", zap.Stringer("plan", *p), zap.Bool("fence_lifted", lifted))
			}
			return
		}
		s.log.Error("shard move recovery", zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// MoveShards runs one move (or dry run), streaming progress and then the result.
func (s *shardAdmin) MoveShards(req *shardv1.MoveShardsRequest, stream shardv1.ShardAdmin_MoveShardsServer) error {
	if req.GetFrom() > zen.MaxShard || req.GetTo() > zen.MaxShard || req.GetFrom() > req.GetTo() {
		return status.Errorf(codes.InvalidArgument, "shards %d–%d: want from ≤ to ≤ %d", req.GetFrom(), req.GetTo(), zen.MaxShard)
	}
	if req.GetTarget() == "" {
		return status.Error(codes.InvalidArgument, "no target store")
	}
	ctx := stream.Context()
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	plan := zenmove.Plan{From: uint16(req.GetFrom()), To: uint16(req.GetTo()), Target: req.GetTarget(),
		MaxFence: time.Duration(req.GetMaxFenceMillis()) * time.Millisecond}
	s.log.Info("shard move requested", zap.Stringer("plan", plan), zap.Bool("dry_run", req.GetDryRun()),
		zap.String("peer", peerAddr(ctx)))
	var (
		res zenmove.Result
		err error
	)
	if req.GetDryRun() {
		res, err = s.mover.DryRun(ctx, plan)
	} else if s.refuse != "" {
		return status.Error(codes.FailedPrecondition, s.refuse)
	} else {
		var last time.Time
		lastPhase := ""
		res, err = s.mover.Move(ctx, plan, func(p zenmove.Progress) {
			if p.Phase == lastPhase && time.Since(last) < 200*time.Millisecond {
				return
			}
			last, lastPhase = time.Now(), p.Phase
			_ = stream.Send(&shardv1.MoveShardsEvent{Event: &shardv1.MoveShardsEvent_Progress{Progress: &shardv1.MoveProgress{
				Phase: p.Phase, Pass: int32(p.Pass), Table: p.Table, Done: p.Done, Total: p.Total, Changed: p.Changed}}})
		})
	}
	if err != nil {
		return moveStatus(err)
	}
	return stream.Send(&shardv1.MoveShardsEvent{Event: &shardv1.MoveShardsEvent_Result{Result: resultProto(res)}})
}

// lock takes the one-move-at-a-time lock. A move already running refuses the request; the
// startup recovery of a crashed move is waited for (while ctx lasts), since it ends on its own
// and the move must start from the state it leaves.
func (s *shardAdmin) lock(ctx context.Context) error {
	for !s.mu.TryLock() {
		if !s.recovering.Load() {
			return status.Error(codes.FailedPrecondition, "another shard move is running in this process")
		}
		select {
		case <-ctx.Done():
			return status.Errorf(codes.Unavailable, "still recovering an unfinished shard move (%v): retry", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func moveStatus(err error) error {
	switch {
	case errors.Is(err, zenmove.ErrPlan):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, zenmove.ErrUnfinished), errors.Is(err, zenmove.ErrFenceTooLong):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, zenmove.ErrMismatch):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error()) // a store failed: the move resumes on a rerun
}

func resultProto(r zenmove.Result) *shardv1.MoveResult {
	out := &shardv1.MoveResult{Source: r.Source, DryRun: r.DryRun, Resumed: r.Resumed, AlreadyDone: r.AlreadyDone,
		TargetRows: r.TargetRows, Passes: int32(r.Passes), RowsCopied: r.RowsCopied, RowsDeleted: r.RowsDeleted,
		FinalRows: r.FinalRows, FenceNanos: int64(r.Fence), TookNanos: int64(r.Took)}
	for _, s := range r.Shards {
		out.Shards = append(out.Shards, &shardv1.ShardStat{Shard: uint32(s.Shard), Rows: s.Rows, Bytes: s.Bytes})
	}
	return out
}

// Package shardadmin serves ShardAdmin, the admin gRPC service of shard moves: one move at a
// time, run by a zenmove.Mover, with its progress streamed and its errors translated to gRPC
// codes; and the zenmove.Maps of a serving process (PublishedMaps), which writes a switched map
// where the process's map comes from (a file, a ZooKeeper znode) and waits for every watching
// process to acknowledge it.
package shardadmin

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
	"google.golang.org/grpc/peer"
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

// PublishedMaps is the zenmove.Maps of a serving process: a map is written where the process's
// shard map comes from (the file, the znode), installed in the router here at once (waiting for
// the writes in flight), and handed to the watcher, which passes it to the graph. With
// ZooKeeper, Publish returns once every process watching the znode has acknowledged the map.
type PublishedMaps struct {
	Router *zenroute.Store
	Watch  *shardwatch.Watcher
	// File is the shard map file ("" for none); ZK and ZKPath the quorum and znode ("" for none).
	File       string
	ZK, ZKPath string
	Log        *zap.Logger
}

// Current returns the router's map.
func (p *PublishedMaps) Current() *zen.ShardMap { return p.Router.Shards() }

// Publish writes m to the file and/or the znode, installs it here, and with ZooKeeper waits for
// every process's acknowledgement.
func (p *PublishedMaps) Publish(ctx context.Context, m *zen.ShardMap) error {
	b, err := m.MarshalJSON()
	if err != nil {
		return fmt.Errorf("encode shard map: %w", err)
	}
	if p.File != "" {
		if err := writeFileAtomic(p.File, b); err != nil {
			return err
		}
	}
	var version int32
	if p.ZK != "" {
		if err := shardwatch.CheckPeers(ctx, p.ZK, p.ZKPath, m); err != nil {
			return err
		}
		if version, err = shardwatch.PublishVersion(ctx, p.ZK, p.ZKPath, m); err != nil {
			return err
		}
	}
	if err := p.Router.Swap(ctx, m); err != nil {
		return err
	}
	source := "file"
	if p.File == "" {
		source = "zookeeper"
	}
	if err := p.Watch.Offer(source, b); err != nil {
		return fmt.Errorf("apply shard map: %w", err)
	}
	if p.ZK != "" {
		actx, cancel := context.WithTimeout(ctx, shardAckWait)
		defer cancel()
		n, err := shardwatch.WaitAcks(actx, p.ZK, p.ZKPath, version)
		if err != nil {
			return err
		}
		p.Log.Info("shard map acknowledged", zap.Int32("version", version), zap.Int("processes", n))
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

// Refusing serves ShardAdmin in a process without extra stores: every call fails with
// FailedPrecondition naming --stores.
type Refusing struct {
	shardv1.UnimplementedShardAdminServer
}

// MoveShards refuses: nothing is routed here.
func (Refusing) MoveShards(*shardv1.MoveShardsRequest, shardv1.ShardAdmin_MoveShardsServer) error {
	return status.Error(codes.FailedPrecondition, noStoresMessage)
}

// Server serves ShardAdmin: one move at a time, run by this process's mover.
type Server struct {
	shardv1.UnimplementedShardAdminServer
	mover *zenmove.Mover
	// refuse is why moves are refused ("" when the map is persisted: file or znode).
	refuse string
	log    *zap.Logger
	mu     sync.Mutex
	// recovering is set while the startup recovery (Recover) holds mu or is about to take
	// it: a move asked for then waits for it, instead of being refused as if another move ran.
	recovering atomic.Bool
}

// New returns a Server running moves with mover. refuse, when set, is why moves (not dry runs)
// are refused: the shard map is not persisted, so a switched map would not outlive a restart.
func New(mover *zenmove.Mover, refuse string, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	return &Server{mover: mover, refuse: refuse, log: log}
}

// Moves reports whether the server runs moves (the shard map is persisted), and so whether a
// move interrupted by a crash must be recovered at start (Recover).
func (s *Server) Moves() bool { return s.refuse == "" }

// Recover lifts the fence of a move that crashed while fenced (see zenmove.Mover.Recover),
// retrying while ctx lasts, since the map's source may not answer yet.
func (s *Server) Recover(ctx context.Context) {
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
func (s *Server) MoveShards(req *shardv1.MoveShardsRequest, stream shardv1.ShardAdmin_MoveShardsServer) error {
	if req.GetFrom() > zen.MaxShard || req.GetTo() > zen.MaxShard || req.GetFrom() > req.GetTo() {
		return status.Errorf(codes.InvalidArgument, "shards %d–%d: want from ≤ to ≤ %d", req.GetFrom(), req.GetTo(), zen.MaxShard)
	}
	if req.GetTarget() == "" {
		return status.Error(codes.InvalidArgument, "no target store")
	}
	res, err := s.move(stream.Context(), req, stream)
	if err != nil {
		return err
	}
	// The lock is free before the result goes out: a client that starts its next move as soon
	// as it has this one's result is not refused as if this one still ran.
	return stream.Send(&shardv1.MoveShardsEvent{Event: &shardv1.MoveShardsEvent_Result{Result: resultProto(res)}})
}

// move runs the request's move (or dry run) under the one-move-at-a-time lock, streaming its
// progress, and returns its result or its error as a gRPC status.
func (s *Server) move(ctx context.Context, req *shardv1.MoveShardsRequest, stream shardv1.ShardAdmin_MoveShardsServer) (zenmove.Result, error) {
	if err := s.lock(ctx); err != nil {
		return zenmove.Result{}, err
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
		return zenmove.Result{}, status.Error(codes.FailedPrecondition, s.refuse)
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
		return zenmove.Result{}, moveStatus(err)
	}
	return res, nil
}

// lock takes the one-move-at-a-time lock. A move already running refuses the request; the
// startup recovery of a crashed move is waited for (while ctx lasts), since it ends on its own
// and the move must start from the state it leaves.
func (s *Server) lock(ctx context.Context) error {
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

// peerAddr is the caller's address, for the log.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

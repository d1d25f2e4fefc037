package feedsvc

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// Settling chunks with the generator: delivered, or given back to the pools when the page
// could not keep them.

// unrecorded settles a chunk whose recording failed: at once back to the pools, or, when the
// write may still land (an *unsureRecording), once that is known.
func (s *Service) unrecorded(user zen.ID, chunkID, what string, err error) {
	var unsure *unsureRecording
	if errors.As(err, &unsure) {
		// The recording may still land: giving the chunk back now could serve its pins
		// twice (from the pending row and again from the pools). Look once it cannot.
		s.log.Warn(what+": outcome unknown", zap.Stringer("user", user), zap.String("chunk", chunkID), zap.Error(err))
		s.settleWhenSure(user, chunkID, unsure.seq)
		return
	}
	s.log.Warn(what, zap.Stringer("user", user), zap.String("chunk", chunkID), zap.Error(err))
	s.settleLater(user, chunkID, false)
}

// abandon settles a chunk the generator returns after the request gave up on it.
func (s *Service) abandon(user zen.ID, ch <-chan genResult) {
	s.m.generatorLate.Inc()
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		r := <-ch
		if r.err == nil && r.c.ID != "" {
			s.settle(user, r.c.ID, false)
		}
	}()
}

func (s *Service) settleLater(user zen.ID, chunkID string, delivered bool) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.settle(user, chunkID, delivered)
	}()
}

// settleWhenSure settles a chunk whose recording's outcome is unknown, once the write can no
// longer land: recorded (a pending row, or already materialized) means the user has it, and
// its materialization is enqueued; not recorded means it goes back to the pools. When the
// store cannot say, or the service closes first, the recovery pass settles it.
func (s *Service) settleWhenSure(user zen.ID, chunkID string, seq uint64) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		t := time.NewTimer(s.unsureGrace)
		defer t.Stop()
		select {
		case <-s.closing:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The recording may have landed after the head version written when it failed.
		s.headChanged(ctx, user)
		st, err := s.ChunkStatus(ctx, user, chunkID)
		switch {
		case err != nil:
			s.log.Warn("chunk of an unknown recording: left to recovery", zap.Stringer("user", user),
				zap.String("chunk", chunkID), zap.Error(err))
		case st == ChunkPending:
			s.m.unsureRecordings.WithLabelValues("recorded").Inc()
			if err := s.enq.EnqueueMaterialize(ctx, MaterializeTask{User: user, ChunkID: chunkID, Seq: seq}); err != nil {
				// The pending row is there: a later read or the recovery pass re-enqueues it.
				s.m.enqueueFailed.Inc()
				s.log.Warn("enqueue materialize", zap.Stringer("user", user), zap.String("chunk", chunkID), zap.Error(err))
			}
		case st == ChunkDone:
			s.m.unsureRecordings.WithLabelValues("recorded").Inc()
			s.settle(user, chunkID, true)
		default:
			s.m.unsureRecordings.WithLabelValues("not_recorded").Inc()
			s.settle(user, chunkID, false)
		}
	}()
}

func (s *Service) settle(user zen.ID, chunkID string, delivered bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.gen.Settle(ctx, user, chunkID, delivered); err != nil {
		// The generator's Pending list lets a recovery pass settle it later.
		s.log.Warn("settle chunk", zap.Stringer("user", user), zap.String("chunk", chunkID),
			zap.Bool("delivered", delivered), zap.Error(err))
	}
}

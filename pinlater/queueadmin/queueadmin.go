// Package queueadmin serves pinlater's queue administration over gRPC (the QueueAdmin service
// of proto/pinlater/v1): what `smartfeed jobs` does with a [pinlater.Admin], for the web
// console and any other client of the admin port.
package queueadmin

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/quote"
	"github.com/smartfeed/smartfeed/pinlater"
	pinlaterv1 "github.com/smartfeed/smartfeed/proto/pinlater/v1"
)

// Queues is the part of [pinlater.Admin] the server uses.
type Queues interface {
	Queues(ctx context.Context) ([]pinlater.QueueStats, error)
	Queue(ctx context.Context, q string) (pinlater.QueueStats, error)
	Tasks(ctx context.Context, q, state string, page, size int) ([]pinlater.TaskState, error)
	Pause(ctx context.Context, q string) error
	Resume(ctx context.Context, q string) error
	SetDraining(ctx context.Context, q string, on bool) error
	SetRate(ctx context.Context, q string, perSecond float64) error
	RetryDead(ctx context.Context, q, id string) error
	RetryAllDead(ctx context.Context, q string) (int, error)
}

var _ Queues = (*pinlater.Admin)(nil)

// Page sizes of ListTasks.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
	// payloadMax is how much of a payload ListTasks shows.
	payloadMax = 512
)

// Server implements pinlaterv1.QueueAdminServer over a Queues. It is safe for concurrent use
// when the Queues is ([pinlater.Admin] is).
type Server struct {
	pinlaterv1.UnimplementedQueueAdminServer
	q Queues
}

var _ pinlaterv1.QueueAdminServer = (*Server)(nil)

// New returns the server of q.
func New(q Queues) *Server { return &Server{q: q} }

// Register registers s on srv.
func Register(srv grpc.ServiceRegistrar, s *Server) { pinlaterv1.RegisterQueueAdminServer(srv, s) }

// ListQueues implements QueueAdmin.ListQueues.
func (s *Server) ListQueues(ctx context.Context, _ *pinlaterv1.ListQueuesRequest) (*pinlaterv1.ListQueuesResponse, error) {
	qs, err := s.q.Queues(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pinlaterv1.ListQueuesResponse{}
	for _, q := range qs {
		out.Queues = append(out.Queues, toQueue(q))
	}
	return out, nil
}

// ListTasks implements QueueAdmin.ListTasks.
func (s *Server) ListTasks(ctx context.Context, r *pinlaterv1.ListTasksRequest) (*pinlaterv1.ListTasksResponse, error) {
	if err := needQueue(r.GetQueue()); err != nil {
		return nil, err
	}
	// The states ListTasks takes ("dead" is pinlater's "archived").
	taskStates := []string{"pending", "active", "scheduled", "retry", "dead", "completed"}
	state := r.GetState()
	if !slices.Contains(taskStates, state) {
		return nil, status.Errorf(codes.InvalidArgument, "state %s: want one of %s", quote.Q(state), strings.Join(taskStates, ", "))
	}
	page, size := int(r.GetPage()), int(r.GetPageSize())
	if page == 0 {
		page = 1
	}
	if size == 0 {
		size = DefaultPageSize
	}
	if page < 1 || size < 1 || size > MaxPageSize {
		return nil, status.Errorf(codes.InvalidArgument, "page %d, page_size %d: want page >= 1 and page_size in 1..%d", page, size, MaxPageSize)
	}
	ts, err := s.q.Tasks(ctx, r.GetQueue(), state, page, size)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pinlaterv1.ListTasksResponse{}
	for _, t := range ts {
		st := t.State
		if st == "archived" {
			st = "dead"
		}
		pt := &pinlaterv1.Task{Id: t.ID, Queue: t.Queue, Type: t.Type, State: st, Attempts: int32(t.Attempts),
			LastError: t.LastErr, Payload: printable(t.Payload)}
		if !t.LastFailedAt.IsZero() {
			pt.LastFailedMs = t.LastFailedAt.UnixMilli()
		}
		if !t.NextProcessAt.IsZero() {
			pt.NextProcessMs = t.NextProcessAt.UnixMilli()
		}
		out.Tasks = append(out.Tasks, pt)
	}
	return out, nil
}

// SetQueuePaused implements QueueAdmin.SetQueuePaused.
func (s *Server) SetQueuePaused(ctx context.Context, r *pinlaterv1.SetQueuePausedRequest) (*pinlaterv1.Queue, error) {
	return s.change(ctx, r.GetQueue(), func() error {
		if r.GetPaused() {
			return s.q.Pause(ctx, r.GetQueue())
		}
		return s.q.Resume(ctx, r.GetQueue())
	})
}

// SetQueueDraining implements QueueAdmin.SetQueueDraining.
func (s *Server) SetQueueDraining(ctx context.Context, r *pinlaterv1.SetQueueDrainingRequest) (*pinlaterv1.Queue, error) {
	return s.change(ctx, r.GetQueue(), func() error { return s.q.SetDraining(ctx, r.GetQueue(), r.GetDraining()) })
}

// SetQueueRate implements QueueAdmin.SetQueueRate.
func (s *Server) SetQueueRate(ctx context.Context, r *pinlaterv1.SetQueueRateRequest) (*pinlaterv1.Queue, error) {
	return s.change(ctx, r.GetQueue(), func() error {
		return s.q.SetRate(ctx, r.GetQueue(), r.GetPerSecond())
	})
}

// SetDeadRetried implements QueueAdmin.SetDeadRetried.
func (s *Server) SetDeadRetried(ctx context.Context, r *pinlaterv1.SetDeadRetriedRequest) (*pinlaterv1.SetDeadRetriedResponse, error) {
	if err := needQueue(r.GetQueue()); err != nil {
		return nil, err
	}
	if r.GetAll() {
		n, err := s.q.RetryAllDead(ctx, r.GetQueue())
		if err != nil {
			return nil, toStatus(err)
		}
		return &pinlaterv1.SetDeadRetriedResponse{Retried: int32(n)}, nil
	}
	if r.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id: empty (or set all)")
	}
	if err := s.q.RetryDead(ctx, r.GetQueue(), r.GetId()); err != nil {
		return nil, toStatus(err)
	}
	return &pinlaterv1.SetDeadRetriedResponse{Retried: 1}, nil
}

// change runs fn on queue q and returns the queue's state after it.
func (s *Server) change(ctx context.Context, q string, fn func() error) (*pinlaterv1.Queue, error) {
	if err := needQueue(q); err != nil {
		return nil, err
	}
	if err := fn(); err != nil {
		return nil, toStatus(err)
	}
	st, err := s.q.Queue(ctx, q)
	if err != nil {
		return nil, toStatus(err)
	}
	return toQueue(st), nil
}

// needQueue refuses a queue name that cannot name a queue (pinlater.CheckQueueName) before
// anything reaches Redis.
func needQueue(q string) error {
	if err := pinlater.CheckQueueName(q); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

func toQueue(q pinlater.QueueStats) *pinlaterv1.Queue {
	return &pinlaterv1.Queue{Name: q.Name, Pending: int64(q.Pending), Active: int64(q.Active),
		Scheduled: int64(q.Scheduled), Retry: int64(q.Retry), Dead: int64(q.Dead),
		LatencyMs: float64(q.Latency.Microseconds()) / 1000, Paused: q.Paused, Draining: q.Draining,
		RateLimit: q.Rate, ProcessedToday: int64(q.Processed), FailedToday: int64(q.Failed)}
}

// toStatus maps pinlater's errors to gRPC codes (a status already made passes through): bad
// input is InvalidArgument or NotFound, and only what Redis failed to answer is Unavailable. The
// message is bounded: pinlater's errors quote the queue and task IDs they were given.
func toStatus(err error) error {
	if st, ok := status.FromError(err); ok {
		return status.Error(st.Code(), quote.Message(st.Message(), maxMessage))
	}
	code := codes.Unavailable
	switch {
	case errors.Is(err, pinlater.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, pinlater.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, quote.Message(err.Error(), maxMessage))
}

// maxMessage bounds the status messages of the server.
const maxMessage = 1024

// printable is the payload as text when it is valid UTF-8, cut to payloadMax bytes; otherwise
// a note of its size.
func printable(b []byte) string {
	if !utf8.Valid(b) {
		return "(" + strconv.Itoa(len(b)) + " bytes, binary)"
	}
	if len(b) > payloadMax {
		cut := payloadMax
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return string(b[:cut]) + "…"
	}
	return string(b)
}

package queueadmin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/smartfeed/smartfeed/pinlater"
	pinlaterv1 "github.com/smartfeed/smartfeed/proto/pinlater/v1"
)

// fakeQueues is one queue, "fanout", in memory, with one dead task "d1"; it records the calls.
type fakeQueues struct {
	st    pinlater.QueueStats
	calls []string
}

func newFake() *fakeQueues {
	return &fakeQueues{st: pinlater.QueueStats{Name: "fanout", Pending: 3, Dead: 1, Latency: 1500 * time.Microsecond, Rate: -1}}
}

func (f *fakeQueues) Queues(context.Context) ([]pinlater.QueueStats, error) {
	return []pinlater.QueueStats{f.st}, nil
}

func (f *fakeQueues) Queue(_ context.Context, q string) (pinlater.QueueStats, error) {
	if q != f.st.Name {
		return pinlater.QueueStats{Name: q, Rate: -1}, nil
	}
	return f.st, nil
}

func (f *fakeQueues) Tasks(_ context.Context, q, state string, page, size int) ([]pinlater.TaskState, error) {
	f.calls = append(f.calls, fmt.Sprintf("tasks %s %s %d %d", q, state, page, size))
	if state != "dead" {
		return nil, nil
	}
	return []pinlater.TaskState{{State: "archived", DeadTask: pinlater.DeadTask{ID: "d1", Queue: q, Type: "fanout",
		Payload: []byte(`{"pin":1}`), Attempts: 3, LastErr: "boom", LastFailedAt: time.UnixMilli(1000)}}}, nil
}

func (f *fakeQueues) Pause(_ context.Context, q string) error {
	f.calls = append(f.calls, "pause "+q)
	f.st.Paused = true
	return nil
}

func (f *fakeQueues) Resume(_ context.Context, q string) error {
	f.calls = append(f.calls, "resume "+q)
	f.st.Paused = false
	return nil
}

func (f *fakeQueues) SetDraining(_ context.Context, q string, on bool) error {
	f.calls = append(f.calls, fmt.Sprintf("drain %s %v", q, on))
	f.st.Draining = on
	return nil
}

func (f *fakeQueues) SetRate(_ context.Context, q string, r float64) error {
	if r > 1e9 {
		return fmt.Errorf("set rate of %s: %v is not a rate: %w", q, r, pinlater.ErrInvalid)
	}
	f.calls = append(f.calls, fmt.Sprintf("rate %s %v", q, r))
	f.st.Rate = r
	return nil
}

func (f *fakeQueues) RetryDead(_ context.Context, q, id string) error {
	if id != "d1" {
		return fmt.Errorf("retry task %s in %s: %w", id, q, pinlater.ErrNotFound)
	}
	f.calls = append(f.calls, "retry "+q+" "+id)
	f.st.Dead, f.st.Pending = 0, f.st.Pending+1
	return nil
}

func (f *fakeQueues) RetryAllDead(_ context.Context, q string) (int, error) {
	f.calls = append(f.calls, "retry all "+q)
	return 1, nil
}

func TestServer(t *testing.T) {
	type call func(context.Context, *Server) (proto.Message, error)
	tests := []struct {
		name      string
		call      call
		want      proto.Message
		wantCode  codes.Code
		wantCalls []string
	}{
		{name: "list queues",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.ListQueues(ctx, &pinlaterv1.ListQueuesRequest{})
			},
			want: &pinlaterv1.ListQueuesResponse{Queues: []*pinlaterv1.Queue{{Name: "fanout", Pending: 3, Dead: 1,
				LatencyMs: 1.5, RateLimit: -1}}}},
		{name: "dead tasks, default page",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.ListTasks(ctx, &pinlaterv1.ListTasksRequest{Queue: "fanout", State: "dead"})
			},
			want: &pinlaterv1.ListTasksResponse{Tasks: []*pinlaterv1.Task{{Id: "d1", Queue: "fanout", Type: "fanout",
				State: "dead", Attempts: 3, LastError: "boom", LastFailedMs: 1000, Payload: `{"pin":1}`}}},
			wantCalls: []string{"tasks fanout dead 1 20"}},
		{name: "unknown state",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.ListTasks(ctx, &pinlaterv1.ListTasksRequest{Queue: "fanout", State: "archived"})
			},
			wantCode: codes.InvalidArgument},
		{name: "page too large",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.ListTasks(ctx, &pinlaterv1.ListTasksRequest{Queue: "fanout", State: "pending", PageSize: 101})
			},
			wantCode: codes.InvalidArgument},
		{name: "pause",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetQueuePaused(ctx, &pinlaterv1.SetQueuePausedRequest{Queue: "fanout", Paused: true})
			},
			want:      &pinlaterv1.Queue{Name: "fanout", Pending: 3, Dead: 1, LatencyMs: 1.5, RateLimit: -1, Paused: true},
			wantCalls: []string{"pause fanout"}},
		{name: "resume",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetQueuePaused(ctx, &pinlaterv1.SetQueuePausedRequest{Queue: "fanout"})
			},
			want:      &pinlaterv1.Queue{Name: "fanout", Pending: 3, Dead: 1, LatencyMs: 1.5, RateLimit: -1},
			wantCalls: []string{"resume fanout"}},
		{name: "no queue",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetQueuePaused(ctx, &pinlaterv1.SetQueuePausedRequest{Paused: true})
			},
			wantCode: codes.InvalidArgument},
		{name: "a queue name too long",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetQueuePaused(ctx, &pinlaterv1.SetQueuePausedRequest{Queue: strings.Repeat("q", 1<<20), Paused: true})
			},
			wantCode: codes.InvalidArgument},
		{name: "drain",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetQueueDraining(ctx, &pinlaterv1.SetQueueDrainingRequest{Queue: "fanout", Draining: true})
			},
			want:      &pinlaterv1.Queue{Name: "fanout", Pending: 3, Dead: 1, LatencyMs: 1.5, RateLimit: -1, Draining: true},
			wantCalls: []string{"drain fanout true"}},
		{name: "rate",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetQueueRate(ctx, &pinlaterv1.SetQueueRateRequest{Queue: "fanout", PerSecond: 5})
			},
			want:      &pinlaterv1.Queue{Name: "fanout", Pending: 3, Dead: 1, LatencyMs: 1.5, RateLimit: 5},
			wantCalls: []string{"rate fanout 5"}},
		{name: "rate refused",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetQueueRate(ctx, &pinlaterv1.SetQueueRateRequest{Queue: "fanout", PerSecond: 2e9})
			},
			wantCode: codes.InvalidArgument},
		{name: "retry a dead task",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetDeadRetried(ctx, &pinlaterv1.SetDeadRetriedRequest{Queue: "fanout", Id: "d1"})
			},
			want: &pinlaterv1.SetDeadRetriedResponse{Retried: 1}, wantCalls: []string{"retry fanout d1"}},
		{name: "retry an unknown task",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetDeadRetried(ctx, &pinlaterv1.SetDeadRetriedRequest{Queue: "fanout", Id: "nope"})
			},
			wantCode: codes.NotFound},
		{name: "retry without an id",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetDeadRetried(ctx, &pinlaterv1.SetDeadRetriedRequest{Queue: "fanout"})
			},
			wantCode: codes.InvalidArgument},
		{name: "retry all",
			call: func(ctx context.Context, s *Server) (proto.Message, error) {
				return s.SetDeadRetried(ctx, &pinlaterv1.SetDeadRetriedRequest{Queue: "fanout", All: true})
			},
			want: &pinlaterv1.SetDeadRetriedResponse{Retried: 1}, wantCalls: []string{"retry all fanout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			got, err := tt.call(context.Background(), New(f))
			if code := status.Code(err); code != tt.wantCode {
				t.Fatalf("code = %v (%v), want %v", code, err, tt.wantCode)
			}
			if err == nil {
				if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
					t.Errorf("response (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tt.wantCalls, f.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPrintable(t *testing.T) {
	long := make([]byte, 600)
	for i := range long {
		long[i] = 'a'
	}
	tests := []struct {
		in   []byte
		want string
	}{
		{[]byte(`{"a":1}`), `{"a":1}`},
		{[]byte{0xff, 0xfe}, "(2 bytes, binary)"},
		{long, string(long[:payloadMax]) + "…"},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, printable(tt.in)); diff != "" {
			t.Errorf("printable(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

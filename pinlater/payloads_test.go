package pinlater

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestValidate(t *testing.T) {
	many := func(n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i + 1)
		}
		return out
	}
	pins := func(n int) []MaterializedPin {
		out := make([]MaterializedPin, n)
		for i := range out {
			out[i] = MaterializedPin{Pin: uint64(i + 1), Source: 1, Score: 1}
		}
		return out
	}
	okFanout := FanoutPayload{V: 1, Pin: 1, Author: 2, Board: 3, Interests: []uint64{4}, CreatedMs: 1}
	okChunk := FanoutChunkPayload{V: 1, Pin: 1, Author: 2, Board: 3, CreatedMs: 1, Source: 1, ListFrom: 2, EdgeType: 11, Limit: 100}
	tests := []struct {
		name    string
		p       Payload
		wantErr string // "" = valid
	}{
		{"fanout ok", okFanout, ""},
		{"fanout version 0", func() Payload { p := okFanout; p.V = 0; return p }(), "unknown version 0"},
		{"fanout version 2", func() Payload { p := okFanout; p.V = 2; return p }(), "unknown version 2"},
		{"fanout zero pin", func() Payload { p := okFanout; p.Pin = 0; return p }(), "pin is zero"},
		{"fanout zero board", func() Payload { p := okFanout; p.Board = 0; return p }(), "board is zero"},
		{"fanout reserved bits", func() Payload { p := okFanout; p.Author = 1 << 63; return p }(), "reserved top bits"},
		{"fanout too many interests", func() Payload { p := okFanout; p.Interests = many(MaxInterests + 1); return p }(), "65 interests"},
		{"fanout max interests", func() Payload { p := okFanout; p.Interests = many(MaxInterests); return p }(), ""},
		{"fanout zero interest", func() Payload { p := okFanout; p.Interests = []uint64{5, 0}; return p }(), "interests[1] is zero"},
		{"fanout no time", func() Payload { p := okFanout; p.CreatedMs = 0; return p }(), "created_ms"},
		{"chunk ok", okChunk, ""},
		{"chunk zero limit", func() Payload { p := okChunk; p.Limit = 0; return p }(), "limit 0"},
		{"chunk huge limit", func() Payload { p := okChunk; p.Limit = MaxChunkLimit + 1; return p }(), "limit 10001"},
		{"chunk long cursor", func() Payload { p := okChunk; p.Cursor = strings.Repeat("x", 600); return p }(), "cursor is 600 bytes"},
		{"chunk zero list", func() Payload { p := okChunk; p.ListFrom = 0; return p }(), "list_from is zero"},
		{"chunk zero source", func() Payload { p := okChunk; p.Source = 0; return p }(), "source is zero"},
		{"backfill ok", FollowBackfillPayload{V: 1, User: 1, Target: 2, TargetKind: KindBoard}, ""},
		{"backfill bad kind", FollowBackfillPayload{V: 1, User: 1, Target: 2, TargetKind: "pin"}, `target_kind "pin"`},
		{"backfill zero user", FollowBackfillPayload{V: 1, Target: 2, TargetKind: KindUser}, "user is zero"},
		{"unfollow ok", UnfollowCleanupPayload{V: 1, User: 1, Target: 2, TargetKind: KindInterest}, ""},
		{"unfollow zero target", UnfollowCleanupPayload{V: 1, User: 1, TargetKind: KindInterest}, "target is zero"},
		{"pin-delete ok", PinDeletePayload{V: 1, Pin: 1, Author: 2}, ""},
		{"pin-delete zero author", PinDeletePayload{V: 1, Pin: 1}, "author is zero"},
		{"user-delete ok", UserDeletePayload{V: 1, User: 1}, ""},
		{"user-delete zero", UserDeletePayload{V: 1}, "user is zero"},
		{"user-delete second pass", UserDeletePayload{V: 1, User: 1, Pass: UserDeleteLastPass}, ""},
		{"user-delete pass 1", UserDeletePayload{V: 1, User: 1, Pass: 1}, "pass 1 is neither"},
		{"materialize ok", MaterializePayload{V: 1, User: 1, ChunkID: "c", Pins: pins(3)}, ""},
		{"materialize no chunk", MaterializePayload{V: 1, User: 1}, "chunk_id is empty"},
		{"materialize oversize", MaterializePayload{V: 1, User: 1, ChunkID: "c", Pins: pins(MaxMaterialize + 1)}, "1001 pins"},
		{"materialize NaN", MaterializePayload{V: 1, User: 1, ChunkID: "c", Pins: []MaterializedPin{{Pin: 1, Score: math.NaN()}}}, "NaN"},
		{"materialize zero pin", MaterializePayload{V: 1, User: 1, ChunkID: "c", Pins: []MaterializedPin{{Pin: 0}}}, "pins[0].pin is zero"},
		{"respace ok", RespacePayload{V: 1, Board: 1}, ""},
		{"respace version", RespacePayload{V: 3, Board: 1}, "unknown version 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkValidate(t, tc.p, tc.wantErr) })
	}
}

// checkValidate fails t unless p.Validate() returns nil (wantErr "") or an error wrapping
// ErrInvalidPayload whose text contains wantErr.
func checkValidate(t *testing.T, p Payload, wantErr string) {
	t.Helper()
	err := p.Validate()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("Validate() = %v, want nil", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("Validate() = %v, want an error containing %q", err, wantErr)
	}
	if !errors.Is(err, ErrInvalidPayload) {
		t.Errorf("error %v does not wrap ErrInvalidPayload", err)
	}
}

func TestConstructorsRoundTrip(t *testing.T) {
	in := MaterializePayload{User: 9, ChunkID: "c-9", Pins: []MaterializedPin{{Pin: 3, Source: 2, Score: 0.25, Reason: "followed board"}}}
	task, err := NewMaterialize(in)
	if err != nil {
		t.Fatal(err)
	}
	if task.Type() != TypeMaterialize || task.Policy().Queue != QueueCritical || task.ID() != "materialize:9:c-9" {
		t.Errorf("task = type %s queue %s id %s", task.Type(), task.Policy().Queue, task.ID())
	}
	var raw map[string]any
	if err := json.Unmarshal(task.Payload(), &raw); err != nil || raw["v"] != float64(1) {
		t.Errorf("payload %s: want v=1 (%v)", task.Payload(), err)
	}
	out, err := Decode[MaterializePayload](task)
	if err != nil {
		t.Fatal(err)
	}
	in.V = 1
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if _, err := Decode[RespacePayload](task); !errors.Is(err, ErrInvalidPayload) {
		t.Errorf("decode as another type: %v, want ErrInvalidPayload", err)
	}
	if _, err := NewRespace(RespacePayload{}); !errors.Is(err, ErrInvalidPayload) {
		t.Errorf("NewRespace(zero board) = %v, want ErrInvalidPayload", err)
	}
	if _, err := NewRespace(RespacePayload{V: 2, Board: 1}); err == nil {
		t.Error("NewRespace accepted version 2")
	}
}

func TestDedupIDs(t *testing.T) {
	type c struct {
		task *Task
		want string
	}
	for _, tc := range []c{
		{mustTask(NewFanout(FanoutPayload{Pin: 5, Author: 1, Board: 2, CreatedMs: 1})), "fanout:5:1:2"},
		{mustTask(NewFanoutChunk(FanoutChunkPayload{Pin: 5, Author: 1, Board: 2, CreatedMs: 1, Source: 1, ListFrom: 1, EdgeType: 11, Cursor: "abc", Limit: 500})), "fanout-chunk:5:1:11:500:abc"},
		{mustTask(NewRespace(RespacePayload{Board: 8})), "respace:8"},
		{mustTask(NewPinDelete(PinDeletePayload{Pin: 8, Author: 1})), "pin-delete:8"},
		{mustTask(NewUserDelete(UserDeletePayload{User: 8})), "user-delete:8"},
		{mustTask(NewUserDelete(UserDeletePayload{User: 8, Pass: UserDeleteLastPass})), "user-delete:8:2"},
		{mustTask(NewFollowBackfill(FollowBackfillPayload{User: 1, Target: 2, TargetKind: KindUser})), ""},
		{mustTask(NewUnfollowCleanup(UnfollowCleanupPayload{User: 1, Target: 2, TargetKind: KindUser})), ""},
	} {
		if tc.task.ID() != tc.want {
			t.Errorf("%s: ID %q, want %q", tc.task.Type(), tc.task.ID(), tc.want)
		}
	}
}

func TestPolicies(t *testing.T) {
	for _, typ := range Types() {
		p, ok := DefaultPolicy(typ)
		if !ok || p.MaxAttempts < 2 || p.Queue == "" || p.Timeout <= 0 || p.BackoffBase <= 0 || p.BackoffMax < p.BackoffBase {
			t.Errorf("policy of %s = %+v, %v", typ, p, ok)
		}
	}
	if _, ok := DefaultPolicy("nope"); ok {
		t.Error("policy for unknown type")
	}
	if p, _ := DefaultPolicy(TypeMaterialize); p.Queue != QueueCritical {
		t.Errorf("materialize queue %s, want critical", p.Queue)
	}
	w := DefaultQueueWeights()
	if !(w[QueueCritical] > w[QueueDefault] && w[QueueDefault] > w[QueueFanout] && w[QueueFanout] > w[QueueBulk]) {
		t.Errorf("weights %v are not in priority order", w)
	}
}

func TestBackoff(t *testing.T) {
	p := Policy{BackoffBase: time.Second, BackoffMax: 30 * time.Second}
	for n, want := range []time.Duration{1, 2, 4, 8, 16, 30, 30, 30} {
		want *= time.Second
		for range 50 {
			got := Backoff(p, n)
			if got < want*3/4 || got > want*5/4 {
				t.Fatalf("Backoff(n=%d) = %v, want %v ±25%%", n, got, want)
			}
		}
	}
	if got := Backoff(p, 1000); got > 38*time.Second {
		t.Errorf("Backoff(1000) = %v: the cap does not hold", got)
	}
}

// FuzzDecode: any bytes under any task type decode to a valid payload or to an error wrapping
// ErrInvalidPayload, never a panic.
func FuzzDecode(f *testing.F) {
	f.Add(TypeFanout, []byte(`{"v":1,"pin":1,"author":2,"board":3,"created_ms":1}`))
	f.Add(TypeMaterialize, []byte(`{"v":1,"user":1,"chunk_id":"c","pins":[{"pin":1,"source":1,"score":0.5}]}`))
	f.Add(TypeRespace, []byte(`{"v":1,"board":-1}`))
	f.Add(TypeFanoutChunk, []byte(`null`))
	f.Add(TypeImpressions, []byte(`{"v":1,"pages":[{"v":1,"user":1,"request_id":"r","events":[{"action":"impression","pin":2,"position":0,"at_ms":1}]}]}`))
	f.Fuzz(func(t *testing.T, typ string, body []byte) {
		task := &Task{typ: typ, payload: body}
		var err error
		switch typ {
		case TypeFanout:
			_, err = Decode[FanoutPayload](task)
		case TypeFanoutChunk:
			_, err = Decode[FanoutChunkPayload](task)
		case TypeFollowBackfill:
			_, err = Decode[FollowBackfillPayload](task)
		case TypeUnfollowCleanup:
			_, err = Decode[UnfollowCleanupPayload](task)
		case TypePinDelete:
			_, err = Decode[PinDeletePayload](task)
		case TypeUserDelete:
			_, err = Decode[UserDeletePayload](task)
		case TypeMaterialize:
			_, err = Decode[MaterializePayload](task)
		case TypeRespace:
			_, err = Decode[RespacePayload](task)
		case TypeImpressions:
			_, err = Decode[ImpressionsPayload](task)
		default:
			_, err = Decode[RespacePayload](task)
			if err == nil {
				t.Fatalf("type %q decoded as respace", typ)
			}
		}
		if err != nil && !errors.Is(err, ErrInvalidPayload) {
			t.Fatalf("Decode(%s, %q) = %v: not ErrInvalidPayload", typ, body, err)
		}
	})
}

package pinlater

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// Task types. Each has one payload type and a default Policy (see DefaultPolicy).
const (
	TypeFanout          = "fanout"
	TypeFanoutChunk     = "fanout-chunk"
	TypeFollowBackfill  = "follow-backfill"
	TypeUnfollowCleanup = "unfollow-cleanup"
	TypePinDelete       = "pin-delete"
	TypeUserDelete      = "user-delete"
	TypeMaterialize     = "materialize"
	TypeRespace         = "respace"
	// TypeFeedDelete removes a deleted user's materialized feed; it runs where the feed service
	// runs (the critical queue), enqueued by a worker in another process.
	TypeFeedDelete = "feed-delete"
	// TypeTouch records a feed read with the worker (last-active time, rebuild of a returning
	// inactive user), enqueued by a feed service in another process.
	TypeTouch = "touch"
)

// Types lists every task type.
func Types() []string {
	return []string{TypeFanout, TypeFanoutChunk, TypeFollowBackfill, TypeUnfollowCleanup,
		TypePinDelete, TypeUserDelete, TypeMaterialize, TypeRespace, TypeFeedDelete,
		TypeTouch, TypeEngagement, TypeImpressions}
}

// Queues, highest priority first. By default a server serves them weighted 6:3:2:1 (so
// user-facing materialize work gets half of the worker slots when every queue has work, and all
// of them when the others are empty); Config.StrictPriority drains each queue before the next.
const (
	QueueCritical = "critical" // materialize, replicate: a user is waiting
	QueueDefault  = "default"  // follow/unfollow upkeep, deletes, inverse edges, respacing
	QueueFanout   = "fanout"   // fanout and fanout-chunk of ordinary authors
	QueueBulk     = "bulk"     // fanout of hot authors (enqueue with the Bulk option)
)

// QueueNames lists the queues, highest priority first.
func QueueNames() []string { return []string{QueueCritical, QueueDefault, QueueFanout, QueueBulk} }

// DefaultQueueWeights are the weights a server uses when Config.Queues is empty.
func DefaultQueueWeights() map[string]int {
	return map[string]int{QueueCritical: 6, QueueDefault: 3, QueueFanout: 2, QueueBulk: 1}
}

// Policy is how a task type is queued and retried.
type Policy struct {
	Queue       string        // queue it goes to unless an Option says otherwise
	MaxAttempts int           // runs in all, the first included (PinLater's numAttemptsAllowed)
	BackoffBase time.Duration // delay before the second attempt; doubles per attempt, ±25% jitter
	BackoffMax  time.Duration // cap of the delay
	Timeout     time.Duration // deadline of one run
}

// DefaultPolicy returns the policy of a task type; ok is false for an unknown type.
func DefaultPolicy(typ string) (p Policy, ok bool) {
	p = Policy{Queue: QueueDefault, MaxAttempts: 8, BackoffBase: time.Second, BackoffMax: 10 * time.Minute, Timeout: 5 * time.Minute}
	switch typ {
	case TypeMaterialize, TypeFeedDelete:
		p = Policy{Queue: QueueCritical, MaxAttempts: 10, BackoffBase: 200 * time.Millisecond, BackoffMax: 30 * time.Second, Timeout: 30 * time.Second}
	case TypeFanout, TypeFanoutChunk:
		p.Queue = QueueFanout
		p.MaxAttempts = 6
		p.Timeout = 10 * time.Minute
	case TypeFollowBackfill, TypeUnfollowCleanup, TypePinDelete, TypeUserDelete, TypeRespace, TypeEngagement, TypeImpressions:
	case TypeTouch:
		// A touch is advisory and superseded by the next feed read: a few quick attempts.
		p.MaxAttempts, p.BackoffMax, p.Timeout = 3, 10*time.Second, 10*time.Second
	default:
		return Policy{}, false
	}
	return p, true
}

// Task is one job: a type, its encoded payload, and how it is enqueued. Build one with a typed
// constructor (NewFanout, NewMaterialize, ...); a handler receives one from the server.
type Task struct {
	typ     string
	payload []byte
	policy  Policy
	id      string // deterministic task ID for deduplication; "" = random

	// Set on the server side only.
	queue   string
	attempt int
}

// Type is the task type, e.g. TypeFanout.
func (t *Task) Type() string { return t.typ }

// Payload is the JSON payload.
func (t *Task) Payload() []byte { return t.payload }

// Policy is the task's queueing and retry policy.
func (t *Task) Policy() Policy { return t.policy }

// ID is the deterministic task ID used for deduplication when enqueuing ("" = none), or the task's
// ID when received by a handler.
func (t *Task) ID() string { return t.id }

// Queue is the logical queue the task was taken from (handler side only).
func (t *Task) Queue() string { return t.queue }

// Attempt is the 1-based number of this run (handler side only).
func (t *Task) Attempt() int { return t.attempt }

// NewTask builds a task from any payload: it validates it and uses the default policy of its type.
// It does not fill in the version; the typed constructors do.
func NewTask(p Payload) (*Task, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	pol, ok := DefaultPolicy(p.TaskType())
	if !ok {
		return nil, fmt.Errorf("unknown task type %q", p.TaskType())
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", p.TaskType(), err)
	}
	return &Task{typ: p.TaskType(), payload: b, policy: pol, id: dedupID(p)}, nil
}

// dedupID is the deterministic task ID of the types where a duplicate would waste work. Types
// whose order matters (follow/unfollow) get none: a dropped duplicate
// there could drop a later, different intent.
func dedupID(p Payload) string {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	switch p := p.(type) {
	case FanoutPayload:
		// A pin is fanned out once per save: a repin of the same pin by another user or onto
		// another board is a different event with different receivers.
		return "fanout:" + u(p.Pin) + ":" + u(p.Author) + ":" + u(p.Board)
	case FanoutChunkPayload:
		return "fanout-chunk:" + u(p.Pin) + ":" + u(p.ListFrom) + ":" + strconv.Itoa(int(p.EdgeType)) + ":" + strconv.Itoa(p.Limit) + ":" + p.Cursor
	case MaterializePayload:
		return "materialize:" + u(p.User) + ":" + p.ChunkID
	case RespacePayload:
		return "respace:" + u(p.Board)
	case PinDeletePayload:
		return "pin-delete:" + u(p.Pin)
	case UserDeletePayload:
		if p.Pass != 0 {
			// Enqueued by the first pass while it still runs (and holds the ID above).
			return "user-delete:" + u(p.User) + ":" + strconv.Itoa(p.Pass)
		}
		return "user-delete:" + u(p.User)
	case FeedDeletePayload:
		return "feed-delete:" + u(p.User)
	case EngagementPayload:
		return "engagement:" + u(p.User) + ":" + p.RequestID
	case ImpressionsPayload:
		return impressionsID(p)
	case TouchPayload:
		// One touch per user per minute: the worker writes the last-active time at most that
		// often anyway (worker.Config.TouchEvery).
		return "touch:" + u(p.User) + ":" + strconv.FormatInt(p.AtMs/touchBucketMs, 10)
	}
	return ""
}

func withVersion(v *int) {
	if *v == 0 {
		*v = PayloadVersion
	}
}

// NewFanout builds a fanout task (version filled in when zero).
func NewFanout(p FanoutPayload) (*Task, error) { withVersion(&p.V); return NewTask(p) }

// NewFanoutChunk builds a fanout-chunk task.
func NewFanoutChunk(p FanoutChunkPayload) (*Task, error) { withVersion(&p.V); return NewTask(p) }

// NewFollowBackfill builds a follow-backfill task.
func NewFollowBackfill(p FollowBackfillPayload) (*Task, error) { withVersion(&p.V); return NewTask(p) }

// NewUnfollowCleanup builds an unfollow-cleanup task.
func NewUnfollowCleanup(p UnfollowCleanupPayload) (*Task, error) {
	withVersion(&p.V)
	return NewTask(p)
}

// NewPinDelete builds a pin-delete task.
func NewPinDelete(p PinDeletePayload) (*Task, error) { withVersion(&p.V); return NewTask(p) }

// NewUserDelete builds a user-delete task.
func NewUserDelete(p UserDeletePayload) (*Task, error) { withVersion(&p.V); return NewTask(p) }

// NewFeedDelete builds a feed-delete task, deduplicated by user.
func NewFeedDelete(p FeedDeletePayload) (*Task, error) { withVersion(&p.V); return NewTask(p) }

// NewTouch builds a touch task, deduplicated by user and minute of AtMs.
func NewTouch(p TouchPayload) (*Task, error) { withVersion(&p.V); return NewTask(p) }

// touchBucketMs is the span within which touches of one user are one task.
const touchBucketMs = 60_000

// NewMaterialize builds a materialize task, deduplicated by (user, chunk).
func NewMaterialize(p MaterializePayload) (*Task, error) { withVersion(&p.V); return NewTask(p) }

// NewRespace builds a respace task, deduplicated by board.
func NewRespace(p RespacePayload) (*Task, error) { withVersion(&p.V); return NewTask(p) }

// Decode decodes and validates a task's payload into P. Its error wraps ErrInvalidPayload for a
// malformed payload or one of another type; the server archives such tasks without retrying.
func Decode[P Payload](t *Task) (P, error) {
	var p P
	if reflect.TypeFor[P]().Kind() != reflect.Struct {
		return p, fmt.Errorf("decode %s: payload type %v is not a struct type: %w", t.typ, reflect.TypeFor[P](), SkipRetry)
	}
	if t.typ != p.TaskType() {
		return p, invalid("task type %q, want %q", t.typ, p.TaskType())
	}
	if err := json.Unmarshal(t.payload, &p); err != nil {
		return p, invalid("%s: %v", t.typ, err)
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

// Option changes how one task is enqueued.
type Option func(*enqueueOptions)

type enqueueOptions struct {
	queue       string
	processAt   time.Time
	maxAttempts int
	timeout     time.Duration
	deadline    time.Time
	id          *string
	outbox      string // the outbox row key (DurableClient), "" when none
}

// InQueue puts the task in the named queue instead of its type's default.
func InQueue(name string) Option { return func(o *enqueueOptions) { o.queue = name } }

// Bulk puts the task in the bulk queue (fanout of hot authors).
func Bulk() Option { return InQueue(QueueBulk) }

// ProcessIn delays the task by d.
func ProcessIn(d time.Duration) Option {
	return func(o *enqueueOptions) { o.processAt = time.Now().Add(d) }
}

// MaxAttempts overrides the number of runs allowed (at least 1).
func MaxAttempts(n int) Option { return func(o *enqueueOptions) { o.maxAttempts = n } }

// Timeout overrides the deadline of one run.
func Timeout(d time.Duration) Option { return func(o *enqueueOptions) { o.timeout = d } }

// Deadline sets an absolute deadline for the task's runs.
func Deadline(t time.Time) Option { return func(o *enqueueOptions) { o.deadline = t } }

// TaskID sets the deduplication ID ("" removes the type's default one). While a task with this ID
// exists in the queue (pending, scheduled, retrying, active or dead), enqueuing another is a
// no-op reported as Info.Duplicate.
func TaskID(id string) Option { return func(o *enqueueOptions) { o.id = &id } }

package pinlater

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/quote"
)

// ErrNotFound is returned for a queue or task that does not exist.
var ErrNotFound = errors.New("not found")

// ErrInvalid is returned for an argument that can never be right: a malformed queue name, a
// rate that is not a number, a page out of range. Retrying it is pointless.
var ErrInvalid = errors.New("invalid argument")

// MaxQueueName bounds queue names (pinlater's are short words).
const MaxQueueName = 128

// CheckQueueName reports a queue name that cannot name a queue: empty, longer than
// MaxQueueName, not UTF-8, or holding spaces, control characters or braces (which would break
// the Redis key layout). The error wraps ErrInvalid and quotes the name bounded.
func CheckQueueName(q string) error {
	switch {
	case q == "":
		return fmt.Errorf("queue name: empty: %w", ErrInvalid)
	case len(q) > MaxQueueName:
		return fmt.Errorf("queue name %s: longer than %d bytes: %w", quote.Q(q), MaxQueueName, ErrInvalid)
	case !utf8.ValidString(q):
		return fmt.Errorf("queue name %s: not UTF-8: %w", quote.Q(q), ErrInvalid)
	}
	for _, r := range q {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == '{' || r == '}' {
			return fmt.Errorf("queue name %s: spaces, control characters and braces are not allowed: %w", quote.Q(q), ErrInvalid)
		}
	}
	return nil
}

// known checks that q names a queue of this namespace: a standard queue (a queue before it
// ever holds a task), or one Redis has. Else ErrInvalid or ErrNotFound: settings (pause, rate,
// drain) are never recorded for a queue that does not exist.
func (a *Admin) known(q string) error {
	if err := CheckQueueName(q); err != nil {
		return err
	}
	if slices.Contains(QueueNames(), q) {
		return nil
	}
	phys, err := a.insp.Queues()
	if err != nil {
		return fmt.Errorf("list queues: %w", err)
	}
	if slices.Contains(phys, a.keys.queue(q)) {
		return nil
	}
	return fmt.Errorf("queue %s: no such queue in this namespace (the queues: %s, and any that holds tasks): %w",
		quote.Q(q), strings.Join(QueueNames(), ", "), ErrNotFound)
}

// Admin inspects and operates queues: sizes and latency, dead tasks, pause and resume, rate
// limits and drain mode. It backs `smartfeed jobs`.
type Admin struct {
	insp *asynq.Inspector
	rdb  redis.UniversalClient
	keys keys
}

// NewAdmin returns an admin over the given Redis; use the same namespace as the servers.
func NewAdmin(r asynq.RedisConnOpt, opts ...ClientOption) (*Admin, error) {
	var o clientOptions
	for _, f := range opts {
		f(&o)
	}
	if err := checkNamespace(o.namespace); err != nil {
		return nil, fmt.Errorf("pinlater admin: %w", err)
	}
	rdb := universal(r)
	if rdb == nil {
		return nil, errors.New("pinlater admin: unsupported redis connection option")
	}
	return &Admin{insp: asynq.NewInspector(r), rdb: rdb, keys: keysFor(rdb, o.namespace)}, nil
}

// Ping checks that the admin's Redis answers.
func (a *Admin) Ping(ctx context.Context) error {
	if err := a.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}

// Close releases the admin's connections.
func (a *Admin) Close() error {
	err := a.insp.Close()
	if e := a.rdb.Close(); err == nil {
		err = e
	}
	return err
}

// QueueStats describes one queue.
type QueueStats struct {
	Name      string // logical name
	Size      int    // pending + active + scheduled + retry + archived (+ completed)
	Pending   int
	Active    int
	Scheduled int // delayed tasks
	Retry     int // failed runs waiting for their retry, and runs put off by the rate limit
	Dead      int // archived
	Latency   time.Duration
	Paused    bool
	Draining  bool
	Rate      float64 // jobs per second; -1 = unlimited
	Processed int     // today
	Failed    int     // today
}

func (a *Admin) rate(ctx context.Context, q string) (float64, error) {
	s, err := a.rdb.HGet(ctx, a.keys.rates(), q).Result()
	if errors.Is(err, redis.Nil) {
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read rate of %s: %w", q, err)
	}
	r, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("rate of %s: %w", q, err)
	}
	return r, nil
}

// Queues lists the standard queues and any other queue of the namespace, in priority order.
func (a *Admin) Queues(ctx context.Context) ([]QueueStats, error) {
	phys, err := a.insp.Queues()
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	names := QueueNames()
	var extra []string
	for _, p := range phys {
		if q, ok := a.keys.logical(p); ok && !slices.Contains(names, q) {
			extra = append(extra, q)
		}
	}
	slices.Sort(extra)
	names = append(names, extra...)
	out := make([]QueueStats, 0, len(names))
	for _, q := range names {
		st, err := a.queue(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// Queue describes one queue (a standard queue that never held a task is reported empty); a
// queue the namespace does not have is ErrNotFound.
func (a *Admin) Queue(ctx context.Context, q string) (QueueStats, error) {
	if err := a.known(q); err != nil {
		return QueueStats{Name: q}, err
	}
	return a.queue(ctx, q)
}

// queue is Queue for a queue known to exist.
func (a *Admin) queue(ctx context.Context, q string) (QueueStats, error) {
	st := QueueStats{Name: q}
	info, err := a.insp.GetQueueInfo(a.keys.queue(q))
	switch {
	case queueNotFound(err):
		// Paused before its first task: asynq keeps the mark, GetQueueInfo does not see it.
		paused, err := a.keys.asynqPausedMark(ctx, a.rdb, q)
		if err != nil {
			return st, fmt.Errorf("queue %s: %w", q, err)
		}
		st.Paused = paused
	case err != nil:
		return st, fmt.Errorf("queue %s: %w", q, err)
	default:
		st.Size, st.Pending, st.Active, st.Scheduled, st.Retry, st.Dead = info.Size, info.Pending, info.Active, info.Scheduled, info.Retry, info.Archived
		st.Latency, st.Paused, st.Processed, st.Failed = info.Latency, info.Paused, info.Processed, info.Failed
	}
	if st.Rate, err = a.rate(ctx, q); err != nil {
		return st, err
	}
	if st.Draining, err = a.rdb.SIsMember(ctx, a.keys.draining(), q).Result(); err != nil {
		return st, fmt.Errorf("read drain set: %w", err)
	}
	return st, nil
}

// DeadTask is an archived task.
type DeadTask struct {
	ID           string
	Queue        string
	Type         string
	Payload      []byte
	Attempts     int
	LastErr      string
	LastFailedAt time.Time
}

func deadTask(q string, ti *asynq.TaskInfo) DeadTask {
	return DeadTask{ID: ti.ID, Queue: q, Type: ti.Type, Payload: ti.Payload, Attempts: ti.Retried + 1,
		LastErr: ti.LastErr, LastFailedAt: ti.LastFailedAt}
}

// DeadTasks lists a page (from 1) of queue q's dead tasks, at most size of them.
func (a *Admin) DeadTasks(ctx context.Context, q string, page, size int) ([]DeadTask, error) {
	if page < 1 || size < 1 || size > 1000 {
		return nil, fmt.Errorf("dead tasks of %s: page %d size %d (want page >= 1, size 1..1000): %w", quote.Q(q), page, size, ErrInvalid)
	}
	if err := a.known(q); err != nil {
		return nil, err
	}
	tis, err := a.insp.ListArchivedTasks(a.keys.queue(q), asynq.Page(page), asynq.PageSize(size))
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dead tasks of %s: %w", q, err)
	}
	out := make([]DeadTask, 0, len(tis))
	for _, ti := range tis {
		out = append(out, deadTask(q, ti))
	}
	return out, nil
}

// TaskState describes any task of a queue.
type TaskState struct {
	DeadTask
	State         string // pending, active, scheduled, retry, archived, completed
	NextProcessAt time.Time
}

// Task looks up one task by ID.
func (a *Admin) Task(ctx context.Context, q, id string) (TaskState, error) {
	if err := CheckQueueName(q); err != nil {
		return TaskState{}, err
	}
	ti, err := a.insp.GetTaskInfo(a.keys.queue(q), id)
	if err != nil {
		return TaskState{}, a.taskErr("inspect", q, id, err)
	}
	return TaskState{DeadTask: deadTask(q, ti), State: ti.State.String(), NextProcessAt: ti.NextProcessAt}, nil
}

func (a *Admin) taskErr(op, q, id string, err error) error {
	if errors.Is(err, asynq.ErrQueueNotFound) || errors.Is(err, asynq.ErrTaskNotFound) {
		return fmt.Errorf("%s task %s in %s: %w", op, id, q, ErrNotFound)
	}
	return fmt.Errorf("%s task %s in %s: %w", op, id, q, err)
}

// TaskStates are the states Tasks lists, in the order a task goes through them.
var TaskStates = []string{"pending", "active", "scheduled", "retry", "archived", "completed"}

// Tasks lists a page (from 1) of queue q's tasks in state (one of TaskStates; "dead" is
// "archived"), at most size of them.
func (a *Admin) Tasks(ctx context.Context, q, state string, page, size int) ([]TaskState, error) {
	if page < 1 || size < 1 || size > 1000 {
		return nil, fmt.Errorf("tasks of %s: page %d size %d (want page >= 1, size 1..1000): %w", quote.Q(q), page, size, ErrInvalid)
	}
	list := map[string]func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
		"pending": a.insp.ListPendingTasks, "active": a.insp.ListActiveTasks, "scheduled": a.insp.ListScheduledTasks,
		"retry": a.insp.ListRetryTasks, "archived": a.insp.ListArchivedTasks, "dead": a.insp.ListArchivedTasks,
		"completed": a.insp.ListCompletedTasks,
	}[state]
	if list == nil {
		return nil, fmt.Errorf("tasks of %s: state %s: want one of %s: %w", quote.Q(q), quote.Q(state), strings.Join(TaskStates, ", "), ErrInvalid)
	}
	if err := a.known(q); err != nil {
		return nil, err
	}
	tis, err := list(a.keys.queue(q), asynq.Page(page), asynq.PageSize(size))
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s tasks of %s: %w", state, q, err)
	}
	out := make([]TaskState, 0, len(tis))
	for _, ti := range tis {
		out = append(out, TaskState{DeadTask: deadTask(q, ti), State: ti.State.String(), NextProcessAt: ti.NextProcessAt})
	}
	return out, nil
}

// DayStats counts one day's runs of a queue.
type DayStats struct {
	Date      time.Time // the day (UTC midnight)
	Processed int       // runs that ended, failed ones included
	Failed    int
}

// History returns queue q's counts of the last days days (1..90), today first.
func (a *Admin) History(ctx context.Context, q string, days int) ([]DayStats, error) {
	if days < 1 || days > 90 {
		return nil, fmt.Errorf("history of %s: %d days (want 1..90): %w", quote.Q(q), days, ErrInvalid)
	}
	if err := a.known(q); err != nil {
		return nil, err
	}
	ds, err := a.insp.History(a.keys.queue(q), days)
	if err != nil && !queueNotFound(err) {
		return nil, fmt.Errorf("history of %s: %w", q, err)
	}
	out := make([]DayStats, 0, len(ds))
	for _, d := range ds {
		out = append(out, DayStats{Date: d.Date, Processed: d.Processed, Failed: d.Failed})
	}
	return out, nil
}

// RunTask moves a scheduled, retrying or dead task to pending: it runs as soon as a worker is
// free (a dead task keeps its attempt count, as with RetryDead).
func (a *Admin) RunTask(ctx context.Context, q, id string) error {
	if err := CheckQueueName(q); err != nil {
		return err
	}
	if err := a.insp.RunTask(a.keys.queue(q), id); err != nil {
		return a.taskErr("run", q, id, err)
	}
	return nil
}

// ArchiveTask moves a pending, scheduled or retrying task to the dead set, where it stays
// until retried or deleted. It never failed, so it has no failure time.
func (a *Admin) ArchiveTask(ctx context.Context, q, id string) error {
	if err := CheckQueueName(q); err != nil {
		return err
	}
	if err := a.insp.ArchiveTask(a.keys.queue(q), id); err != nil {
		return a.taskErr("archive", q, id, err)
	}
	return nil
}

// RetryDead moves a dead task back to its queue, with its attempt count kept: it gets one more run
// before it is dead again (asynq does not reset the count).
func (a *Admin) RetryDead(ctx context.Context, q, id string) error {
	if err := CheckQueueName(q); err != nil {
		return err
	}
	if err := a.insp.RunTask(a.keys.queue(q), id); err != nil {
		return a.taskErr("retry", q, id, err)
	}
	return nil
}

// RetryAllDead moves every dead task of q back to the queue.
func (a *Admin) RetryAllDead(ctx context.Context, q string) (int, error) {
	if err := a.known(q); err != nil {
		return 0, err
	}
	n, err := a.insp.RunAllArchivedTasks(a.keys.queue(q))
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return 0, nil
	}
	if err != nil {
		return n, fmt.Errorf("retry dead tasks of %s: %w", q, err)
	}
	return n, nil
}

// DeleteTask deletes a task that is not running (dead, pending, scheduled or retrying).
func (a *Admin) DeleteTask(ctx context.Context, q, id string) error {
	if err := CheckQueueName(q); err != nil {
		return err
	}
	if err := a.insp.DeleteTask(a.keys.queue(q), id); err != nil {
		return a.taskErr("delete", q, id, err)
	}
	return nil
}

// DeleteAllDead deletes every dead task of q.
func (a *Admin) DeleteAllDead(ctx context.Context, q string) (int, error) {
	if err := a.known(q); err != nil {
		return 0, err
	}
	n, err := a.insp.DeleteAllArchivedTasks(a.keys.queue(q))
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return 0, nil
	}
	if err != nil {
		return n, fmt.Errorf("delete dead tasks of %s: %w", q, err)
	}
	return n, nil
}

// Pause stops every server from taking tasks of q; running tasks finish.
func (a *Admin) Pause(ctx context.Context, q string) error {
	if err := a.known(q); err != nil {
		return err
	}
	if err := a.insp.PauseQueue(a.keys.queue(q)); err != nil && !isAlready(err) {
		return fmt.Errorf("pause %s: %w", q, err)
	}
	return nil
}

// Resume lets servers take tasks of q again. A rate of 0 (which pauses) is lifted too: the queue
// is then unlimited.
func (a *Admin) Resume(ctx context.Context, q string) error {
	if err := a.known(q); err != nil {
		return err
	}
	r, err := a.rate(ctx, q)
	if err != nil {
		return err
	}
	if r == 0 {
		if err := a.rdb.HDel(ctx, a.keys.rates(), q).Err(); err != nil {
			return fmt.Errorf("resume %s: %w", q, err)
		}
	}
	if err := a.insp.UnpauseQueue(a.keys.queue(q)); err != nil && !isAlready(err) {
		return fmt.Errorf("resume %s: %w", q, err)
	}
	return nil
}

// queueNotFound reports asynq's "queue does not exist" (GetQueueInfo returns it unwrapped from an
// internal package, with code NOT_FOUND).
func queueNotFound(err error) bool {
	return err != nil && (errors.Is(err, asynq.ErrQueueNotFound) || strings.Contains(err.Error(), "NOT_FOUND"))
}

// isAlready reports asynq's "queue is already paused/not paused" errors, which leave the wanted
// state in place.
func isAlready(err error) bool {
	s := err.Error()
	return strings.Contains(s, "already paused") || strings.Contains(s, "is not paused")
}

// SetRate sets q's rate limit in jobs per second, for every server at once and without a restart
// (each run reads it). 0 pauses the queue; a positive rate un-pauses it. A negative rate removes
// the limit (and un-pauses).
func (a *Admin) SetRate(ctx context.Context, q string, perSecond float64) error {
	if math.IsNaN(perSecond) || math.IsInf(perSecond, 0) || perSecond > 1e9 {
		return fmt.Errorf("set rate of %s: %v is not a rate: %w", quote.Q(q), perSecond, ErrInvalid)
	}
	if err := a.known(q); err != nil {
		return err
	}
	var err error
	if perSecond < 0 {
		err = a.rdb.HDel(ctx, a.keys.rates(), q).Err()
	} else {
		err = a.rdb.HSet(ctx, a.keys.rates(), q, strconv.FormatFloat(perSecond, 'g', -1, 64)).Err()
	}
	if err != nil {
		return fmt.Errorf("set rate of %s: %w", q, err)
	}
	if perSecond == 0 {
		return a.Pause(ctx, q)
	}
	if err := a.insp.UnpauseQueue(a.keys.queue(q)); err != nil && !isAlready(err) && !errors.Is(err, asynq.ErrQueueNotFound) {
		return fmt.Errorf("set rate of %s: %w", q, err)
	}
	return nil
}

// Rates returns the rate of every limited queue (jobs per second).
func (a *Admin) Rates(ctx context.Context) (map[string]float64, error) {
	m, err := a.rdb.HGetAll(ctx, a.keys.rates()).Result()
	if err != nil {
		return nil, fmt.Errorf("read rates: %w", err)
	}
	out := make(map[string]float64, len(m))
	for q, s := range m {
		r, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("rate of %s: %w", q, err)
		}
		out[q] = r
	}
	return out, nil
}

// SetDraining turns drain mode of q on or off. A draining queue refuses new enqueues (clients see
// ErrQueueDraining within their drain-check interval) while the servers keep running what it
// holds, so it empties (PinLater's dequeue-only mode, e.g. before moving a queue). WaitDrained
// waits for the end.
func (a *Admin) SetDraining(ctx context.Context, q string, on bool) error {
	if err := a.known(q); err != nil {
		return err
	}
	var err error
	if on {
		err = a.rdb.SAdd(ctx, a.keys.draining(), q).Err()
	} else {
		err = a.rdb.SRem(ctx, a.keys.draining(), q).Err()
	}
	if err != nil {
		return fmt.Errorf("set draining of %s: %w", q, err)
	}
	return nil
}

// WaitDrained polls every poll until q holds no pending, active, scheduled or retrying task (dead
// ones do not count) or ctx ends.
func (a *Admin) WaitDrained(ctx context.Context, q string, poll time.Duration) error {
	for {
		st, err := a.Queue(ctx, q)
		if err != nil {
			return err
		}
		if st.Pending+st.Active+st.Scheduled+st.Retry == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to drain (%d pending, %d active, %d scheduled, %d retry): %w",
				q, st.Pending, st.Active, st.Scheduled, st.Retry, ctx.Err())
		case <-time.After(poll):
		}
	}
}

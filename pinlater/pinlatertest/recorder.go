// Package pinlatertest holds test doubles for code that enqueues or handles pinlater tasks.
package pinlatertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/smartfeed/smartfeed/pinlater"
)

// Recorder stands in for *pinlater.Client in tests: it keeps enqueued tasks in memory, in order,
// and deduplicates by task ID like the real client (a task whose ID is queued and not yet run is
// reported as Duplicate). Enqueue options are accepted and ignored. Set Err to make Enqueue fail.
type Recorder struct {
	mu      sync.Mutex
	Err     error
	pending []*pinlater.Task
	all     []*pinlater.Task
	ids     map[string]bool
	seq     int
}

// Enqueue records t.
func (r *Recorder) Enqueue(_ context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Err != nil {
		return nil, r.Err
	}
	if t == nil {
		return nil, errors.New("enqueue: nil task")
	}
	id := t.ID()
	info := &pinlater.Info{ID: id, Type: t.Type(), Queue: t.Policy().Queue}
	if id != "" && r.ids[id] {
		info.Duplicate = true
		return info, nil
	}
	if id == "" {
		r.seq++
		info.ID = "rec-" + strconv.Itoa(r.seq)
	} else {
		if r.ids == nil {
			r.ids = map[string]bool{}
		}
		r.ids[id] = true
	}
	r.pending = append(r.pending, t)
	r.all = append(r.all, t)
	return info, nil
}

// Tasks returns every task recorded (not duplicates), in order.
func (r *Recorder) Tasks() []*pinlater.Task {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*pinlater.Task(nil), r.all...)
}

// OfType returns the recorded tasks of one type, in order.
func (r *Recorder) OfType(typ string) []*pinlater.Task {
	var out []*pinlater.Task
	for _, t := range r.Tasks() {
		if t.Type() == typ {
			out = append(out, t)
		}
	}
	return out
}

// Run hands the pending tasks, oldest first, to the handler of their type, including tasks the
// handlers enqueue on the way, until none is pending or a handler fails (its task stays pending
// and the error is returned). A task of a type without handler is an error.
func (r *Recorder) Run(ctx context.Context, handlers map[string]pinlater.Handler) error {
	for {
		r.mu.Lock()
		if len(r.pending) == 0 {
			r.mu.Unlock()
			return nil
		}
		t := r.pending[0]
		r.mu.Unlock()
		h := handlers[t.Type()]
		if h == nil {
			return fmt.Errorf("no handler for %s", t.Type())
		}
		if err := h.ProcessTask(ctx, t); err != nil {
			return fmt.Errorf("%s %s: %w", t.Type(), t.ID(), err)
		}
		r.mu.Lock()
		r.pending = r.pending[1:]
		delete(r.ids, t.ID())
		r.mu.Unlock()
	}
}

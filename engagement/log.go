package engagement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/smartfeed/smartfeed/zen"
)

// LogRow is the impression log's record of one pin shown to one user: the features it was
// scored with when first shown, the arm and model of the user then, and the actions that
// followed (its labels).
type LogRow struct {
	User     uint64   `json:"user"`
	Pin      uint64   `json:"pin"`
	AtMs     int64    `json:"at_ms"`
	Arm      string   `json:"arm,omitempty"`
	Model    string   `json:"model,omitempty"`
	Position int      `json:"position"`
	Fresh    bool     `json:"fresh,omitempty"`
	Inputs   Inputs   `json:"inputs"`
	Labels   []string `json:"labels,omitempty"`
}

// Engaged reports whether a positive action (close-up, click, save, like) followed the
// impression and no hide did: the label training learns.
func (r LogRow) Engaged() bool {
	if slices.Contains(r.Labels, "hide") {
		return false
	}
	return slices.ContainsFunc(r.Labels, Positive)
}

// Event is one action of a Batch, with the facts of its pin that the caller read (the worker:
// the pin object, its interests, and the features the scorer would see for this user now).
type Event struct {
	Action    string
	Pin       zen.ID
	Position  int
	Fresh     bool
	AtMs      int64
	Source    zen.Source
	Author    zen.ID
	Board     zen.ID
	Interests []zen.ID
	Inputs    Inputs
}

// Batch is one reported batch of a user's events (EngagementService.Report), applied once by
// its request ID.
type Batch struct {
	User      zen.ID
	RequestID string
	Arm       string
	Model     string
	Events    []Event
}

// Applied reports whether the batch of user with request ID was applied already.
func (s *Store) Applied(ctx context.Context, user zen.ID, request string) (bool, error) {
	ok, err := s.isMarked(ctx, markKey(user, request))
	if err != nil {
		return false, fmt.Errorf("batch mark of %d: %w", user, err)
	}
	return ok, nil
}

// Apply records a batch: each impression's log row (the first impression of a pin wins), each
// action's label on it, each hide, and then, once per request ID, the affinity changes. The log
// rows, labels and hides are idempotent writes; the affinities are changed only by the call
// that places the batch's mark, so a batch applied twice (a retried task) changes them once. A
// crash between the mark and the profile update loses that batch's affinity change: a ranking
// signal, tolerated. It reports false when the batch had been applied before.
func (s *Store) Apply(ctx context.Context, b Batch) (bool, error) {
	mk := markKey(b.User, b.RequestID)
	done, err := s.isMarked(ctx, mk)
	if err != nil {
		return false, fmt.Errorf("apply batch of %d: %w", b.User, err)
	}
	if done {
		return false, nil
	}
	for _, e := range b.Events {
		if err := s.logEvent(ctx, b, e); err != nil {
			return false, err
		}
		if e.Action == "hide" {
			if err := s.Hide(ctx, b.User, e.Pin, e.Author); err != nil {
				return false, err
			}
		}
	}
	won, err := s.t.CheckAndSet(ctx, mk, nil, []byte{1})
	if err != nil {
		return false, fmt.Errorf("apply batch of %d: mark: %w", b.User, err)
	}
	if !won {
		return false, nil
	}
	return true, s.updateProfile(ctx, b.User, func(p *Profile) {
		for _, e := range b.Events {
			w := ActionWeight(e.Action)
			if w == 0 {
				continue
			}
			if e.Author != 0 {
				p.add(KindAuthor, uint64(e.Author), w, e.AtMs, s.halfLife)
			}
			if e.Board != 0 {
				p.add(KindBoard, uint64(e.Board), w, e.AtMs, s.halfLife)
			}
			for _, in := range e.Interests {
				p.add(KindInterest, uint64(in), w/float64(len(e.Interests)), e.AtMs, s.halfLife)
			}
			p.add(KindSource, uint64(e.Source), w, e.AtMs, s.halfLife)
		}
	})
}

// logEvent writes e into the log row of (user, pin) by compare-and-set: an impression creates
// the row when absent; another action adds its label (creating the row with the event's
// features when the impression was never reported).
func (s *Store) logEvent(ctx context.Context, b Batch, e Event) error {
	k := key(b.User, rowLog, idBytes(e.Pin))
	for attempt := 0; ; attempt++ {
		cur, err := s.t.Get(ctx, k)
		if err != nil && !errors.Is(err, zen.ErrNotFound) {
			return fmt.Errorf("log %d/%d: %w", b.User, e.Pin, err)
		}
		var r LogRow
		if cur != nil {
			if err := json.Unmarshal(cur, &r); err != nil {
				return fmt.Errorf("log %d/%d: %w", b.User, e.Pin, err)
			}
		} else {
			r = LogRow{User: uint64(b.User), Pin: uint64(e.Pin), AtMs: e.AtMs, Arm: b.Arm, Model: b.Model,
				Position: e.Position, Fresh: e.Fresh, Inputs: e.Inputs}
		}
		if e.Action != "impression" {
			if slices.Contains(r.Labels, e.Action) {
				if cur != nil {
					return nil
				}
			} else {
				r.Labels = append(r.Labels, e.Action)
			}
		} else if cur != nil {
			return nil
		}
		v, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("log %d/%d: %w", b.User, e.Pin, err)
		}
		won, err := s.t.CheckAndSet(ctx, k, cur, v)
		if err != nil {
			return fmt.Errorf("log %d/%d: %w", b.User, e.Pin, err)
		}
		if won {
			return nil
		}
		if attempt >= 100 {
			return fmt.Errorf("log %d/%d: %w", b.User, e.Pin, zen.ErrUnavailable)
		}
	}
}

// ScanLog calls fn with every impression log row of the table, in (user, pin) order. fn
// returning an error stops the scan with it.
func (s *Store) ScanLog(ctx context.Context, fn func(LogRow) error) error {
	const page = 5000
	var start []byte
	for {
		rows, err := s.t.Scan(ctx, zen.ScanOptions{Start: start, Limit: page})
		if err != nil {
			return fmt.Errorf("scan impression log: %w", err)
		}
		for _, kv := range rows {
			if len(kv.Key) != 17 || kv.Key[8] != rowLog {
				continue
			}
			var r LogRow
			if err := json.Unmarshal(kv.Value, &r); err != nil {
				return fmt.Errorf("impression log row %x: %w", kv.Key, err)
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(rows) < page {
			return nil
		}
		start = append(slices.Clone(rows[len(rows)-1].Key), 0)
	}
}

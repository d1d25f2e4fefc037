package feedsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
)

// The knobs file tunes a running service without a redeploy. Every field is optional; the
// ones present override the current values, durations are Go strings ("10ms", "1.5s"):
//
//	{
//	  "hedge":   {"mode": "percentile", "percentile": 99.9, "min": "2ms", "max": "100ms",
//	              "delay": "10ms", "budget": 0.02, "budget_burst": 10, "warmup": 0.01, "min_samples": 100,
//	              "primary_timeout": "1s", "breaker_failures": 5, "breaker_slow_rate": 0.5,
//	              "breaker_interval": "1s", "breaker_window": 20, "breaker_open_for": "2s", "breaker_probes": 3},
//	  "service": {"generator_deadline": "150ms", "persist_timeout": "200ms", "max_items": 1000,
//	              "default_page_size": 25, "max_page_size": 200, "stale_pending": "30s",
//	              "prepare_after": "0s", "prepared_max_age": "30s", "min_chunk_interval": "0s",
//	              "inline_materialize": 4, "max_inflight": 0, "admission_wait": "50ms"},
//	  "standby": {"max_staleness": "5s"}
//	}
//
// "hedge" is hedge.Policy's JSON form, decoded over the policy in force. standby.max_staleness
// bounds the replication lag at which the standby still answers reads ("0s": unbounded); it
// needs a service built with a StandbyGate.
type knobsFile struct {
	Hedge   json.RawMessage `json:"hedge"`
	Service *serviceKnobs   `json:"service"`
	Standby *standbyKnobs   `json:"standby"`
}

type standbyKnobs struct {
	MaxStaleness *duration `json:"max_staleness"`
}

type serviceKnobs struct {
	GeneratorDeadline *duration `json:"generator_deadline"`
	PersistTimeout    *duration `json:"persist_timeout"`
	MaxItems          *int      `json:"max_items"`
	DefaultPageSize   *int      `json:"default_page_size"`
	MaxPageSize       *int      `json:"max_page_size"`
	StalePending      *duration `json:"stale_pending"`
	PrepareAfter      *duration `json:"prepare_after"`
	PreparedMaxAge    *duration `json:"prepared_max_age"`
	PrepareReturning  *bool     `json:"prepare_returning"`
	MinChunkInterval  *duration `json:"min_chunk_interval"`
	InlineMaterialize *int      `json:"inline_materialize"`
	MaxInflight       *int      `json:"max_inflight"`
	MaxGenerating     *int      `json:"max_generating"`
	AdmissionWait     *duration `json:"admission_wait"`
}

type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"10ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

func setDur(dst *time.Duration, src *duration) {
	if src != nil {
		*dst = time.Duration(*src)
	}
}

// ApplyKnobs applies a knobs document (see the knobs file format above). It is all or
// nothing: a document with an unknown field or a value out of range changes nothing.
func (s *Service) ApplyKnobs(doc []byte) error {
	var k knobsFile
	d := json.NewDecoder(bytes.NewReader(doc))
	d.DisallowUnknownFields()
	if err := d.Decode(&k); err != nil {
		return fmt.Errorf("knobs: %w", err)
	}
	p, c := s.hedger.Policy(), s.Config()
	if k.Hedge != nil {
		if err := json.Unmarshal(k.Hedge, &p); err != nil {
			return fmt.Errorf("knobs: %w", err)
		}
	}
	if v := k.Service; v != nil {
		setDur(&c.GeneratorDeadline, v.GeneratorDeadline)
		setDur(&c.PersistTimeout, v.PersistTimeout)
		set(&c.MaxItems, v.MaxItems)
		set(&c.DefaultPageSize, v.DefaultPageSize)
		set(&c.MaxPageSize, v.MaxPageSize)
		setDur(&c.StalePending, v.StalePending)
		setDur(&c.PrepareAfter, v.PrepareAfter)
		setDur(&c.PreparedMaxAge, v.PreparedMaxAge)
		set(&c.PrepareReturning, v.PrepareReturning)
		setDur(&c.MinChunkInterval, v.MinChunkInterval)
		set(&c.InlineMaterialize, v.InlineMaterialize)
		set(&c.MaxInflight, v.MaxInflight)
		set(&c.MaxGenerating, v.MaxGenerating)
		setDur(&c.AdmissionWait, v.AdmissionWait)
	}
	var maxStale *time.Duration
	if v := k.Standby; v != nil && v.MaxStaleness != nil {
		d := time.Duration(*v.MaxStaleness)
		switch {
		case s.gate == nil:
			return fmt.Errorf("knobs: standby.max_staleness: this service has no staleness gate")
		case d < 0:
			return fmt.Errorf("knobs: standby.max_staleness %v: must not be negative", d)
		}
		maxStale = &d
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("knobs: %w", err)
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("knobs: %w", err)
	}
	if err := s.hedger.SetPolicy(p); err != nil {
		return fmt.Errorf("knobs: %w", err)
	}
	if maxStale != nil {
		if err := s.gate.SetMaxStaleness(*maxStale); err != nil {
			return fmt.Errorf("knobs: %w", err)
		}
	}
	return s.SetConfig(c)
}

// WatchKnobs applies the knobs file at path now and whenever its contents change, checking
// every interval, until ctx is done. A bad file is logged and skipped (the last good knobs
// stay); only an unreadable or bad file at the start is returned as an error.
func (s *Service) WatchKnobs(ctx context.Context, path string, every time.Duration) error {
	last, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("knobs: %w", err)
	}
	if err := s.ApplyKnobs(last); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		b, err := os.ReadFile(path)
		if err != nil {
			s.log.Warn("read knobs file", zap.String("path", path), zap.Error(err))
			continue
		}
		if bytes.Equal(b, last) {
			continue
		}
		last = b
		if err := s.ApplyKnobs(b); err != nil {
			s.log.Warn("knobs file refused; previous knobs kept", zap.String("path", path), zap.Error(err))
			continue
		}
		s.log.Info("knobs reloaded", zap.String("path", path))
	}
}

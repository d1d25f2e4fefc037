// Package slowtrace keeps the last seconds of the process's execution trace in memory (Go's
// flight recorder, runtime/trace.FlightRecorder) and writes them to a file when a call takes
// longer than a bound: what every goroutine was doing while a slow request waited, for
// `go tool trace` or scripts/tracewait. A CPU profile shows where time is spent on average; a
// tail request is usually one that waited (for a processor, behind a compaction, on a lock),
// and only a trace of that moment shows what it waited for (docs/read-path.md, "What a slow
// request waited for").
//
// At most one flight recorder runs in a process (a Go runtime limit), so a process starts at
// most one Recorder.
package slowtrace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/trace"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Options configure a Recorder.
type Options struct {
	// Dir is where the traces are written (created if missing).
	Dir string
	// Over is the bound: a call that takes longer is written. Default 100ms.
	Over time.Duration
	// Window is how much trace the recorder keeps (its FlightRecorderConfig.MinAge). Default 5s.
	Window time.Duration
	// Gap is the least time between two traces written. Default 10s.
	Gap time.Duration
	// MaxFiles bounds the traces written by the process (each is a few MB). Default 50.
	MaxFiles int
	// Logger and Registerer may be nil.
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// Recorder records the execution trace and writes its window when a call is slow.
type Recorder struct {
	o      Options
	fr     *trace.FlightRecorder
	mu     sync.Mutex
	last   time.Time
	files  int
	wg     sync.WaitGroup
	writes *prometheus.CounterVec
}

// Start starts the flight recorder.
func Start(o Options) (*Recorder, error) {
	if o.Dir == "" {
		return nil, errors.New("slowtrace: no directory")
	}
	if o.Over <= 0 {
		o.Over = 100 * time.Millisecond
	}
	if o.Window <= 0 {
		o.Window = 5 * time.Second
	}
	if o.Gap <= 0 {
		o.Gap = 10 * time.Second
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = 50
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("slowtrace: %w", err)
	}
	f := promauto.With(o.Registerer)
	r := &Recorder{o: o, writes: f.NewCounterVec(prometheus.CounterOpts{
		Name: "smartfeed_slow_traces_total",
		Help: "Calls slower than the slow-trace bound, by outcome: written (the trace window went to a file), skipped (within the gap after the last one, or past the file bound), failed.",
	}, []string{"outcome"})}
	r.fr = trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: o.Window})
	if err := r.fr.Start(); err != nil {
		return nil, fmt.Errorf("slowtrace: start the flight recorder: %w", err)
	}
	return r, nil
}

// Observe reports a call named name that took took. A call over the bound has the trace window
// written, in the background, unless one was written less than Gap ago or MaxFiles are written.
func (r *Recorder) Observe(name string, took time.Duration) {
	if took <= r.o.Over {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if r.files >= r.o.MaxFiles || !r.last.IsZero() && now.Sub(r.last) < r.o.Gap {
		r.mu.Unlock()
		r.writes.WithLabelValues("skipped").Inc()
		return
	}
	r.last = now
	r.files++
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		path, err := r.write(name, took, now)
		if err != nil {
			r.writes.WithLabelValues("failed").Inc()
			r.o.Logger.Warn("slow trace", zap.String("call", name), zap.Duration("took", took), zap.Error(err))
			return
		}
		r.writes.WithLabelValues("written").Inc()
		r.o.Logger.Info("slow trace written", zap.String("call", name), zap.Duration("took", took), zap.String("file", path))
	}()
}

func (r *Recorder) write(name string, took time.Duration, at time.Time) (string, error) {
	base := name[strings.LastIndexByte(name, '/')+1:]
	base = strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			return c
		}
		return '_'
	}, base)
	if len(base) > 64 {
		base = base[:64]
	}
	path := filepath.Join(r.o.Dir, fmt.Sprintf("slow-%s-%s-%dms.trace", at.UTC().Format("20060102T150405.000"), base, took.Milliseconds()))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := r.fr.WriteTo(f); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return "", err
	}
	return path, f.Close()
}

// UnaryInterceptor times each unary call and reports it to Observe under its method name.
func (r *Recorder) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		r.Observe(info.FullMethod, time.Since(start))
		return resp, err
	}
}

// Close waits for the traces being written and stops the flight recorder.
func (r *Recorder) Close() {
	r.wg.Wait()
	r.fr.Stop()
}

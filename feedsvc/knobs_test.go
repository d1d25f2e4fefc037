package feedsvc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/internal/testenv"
)

func TestApplyKnobs(t *testing.T) {
	e := newEnv(t, nil)
	doc, err := os.ReadFile("testdata/knobs.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.ApplyKnobs(doc); err != nil {
		t.Fatal(err)
	}
	wantP := hedge.DefaultPolicy()
	wantP.Percentile, wantP.Min, wantP.Max, wantP.Budget, wantP.Warmup = 99, time.Millisecond, 50*time.Millisecond, 0.05, 0.1
	if diff := cmp.Diff(wantP, e.svc.Hedger().Policy()); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
	wantC := DefaultConfig()
	wantC.GeneratorDeadline, wantC.MaxItems, wantC.InlineMaterialize = 80*time.Millisecond, 500, 2
	if diff := cmp.Diff(wantC, e.svc.Config()); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	for _, tc := range []struct{ doc, want string }{
		{`{"hedge": {"percentile": 100}}`, "percentile"},
		{`{"hedge": {"max": 10}}`, "duration"},
		{`{"hedge": {"budget": 0.5}, "service": {"max_items": 0}}`, "max items"},
		{`{"hegde": {}}`, "unknown field"},
		{`{"service": {"generator_deadline": "soon"}}`, "duration"},
		{`{"service": {"inline_materialize": -1}}`, "inline materialize"},
		{`not json`, "knobs"},
	} {
		err := e.svc.ApplyKnobs([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ApplyKnobs(%s) = %v, want an error naming %q", tc.doc, err, tc.want)
		}
	}
	if diff := cmp.Diff(wantP, e.svc.Hedger().Policy()); diff != "" {
		t.Errorf("refused documents changed the policy (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantC, e.svc.Config()); diff != "" {
		t.Errorf("refused documents changed the config (-want +got):\n%s", diff)
	}
}

func TestWatchKnobsReloads(t *testing.T) {
	e := newEnv(t, nil)
	core, logs := observer.New(zapcore.WarnLevel)
	e.rebuild(t, func(d *Deps) { d.Logger = zap.New(core) })
	path := filepath.Join(t.TempDir(), "knobs.json")
	if err := os.WriteFile(path, []byte(`{"hedge": {"warmup": 0.2}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- e.svc.WatchKnobs(ctx, path, 5*time.Millisecond) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchKnobs: %v", err)
		}
	}()
	waitUntil(t, func() bool { return e.svc.Hedger().Policy().Warmup == 0.2 })
	if err := os.WriteFile(path, []byte(`{"hedge": {"warmup": 2}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, testenv.WaitTimeout, "the watcher to refuse the file with warmup 2", func() bool {
		for _, l := range logs.FilterMessage("knobs file refused; previous knobs kept").All() {
			if err, _ := l.ContextMap()["error"].(string); strings.Contains(err, "warmup 2 ") {
				return true
			}
		}
		return false
	})
	if got := e.svc.Hedger().Policy().Warmup; got != 0.2 {
		t.Errorf("a bad file changed warmup to %v", got)
	}
	if err := os.WriteFile(path, []byte(`{"hedge": {"mode": "fixed", "delay": "3ms"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		p := e.svc.Hedger().Policy()
		return p.Mode == hedge.ModeFixed && p.Delay == 3*time.Millisecond
	})
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

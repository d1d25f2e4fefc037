package pinlater

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// testDB is the Redis database the pinlater tests use; each test also has its own namespace and
// purges it when done.
const testDB = 11

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(runCrashChild())
	}
	goleak.VerifyTestMain(m, testenv.LeakOptions()...) // fails the tests when a goroutine they started outlives them
}

// redisAddr returns the test Redis (internal/testenv: skipped under -short or
// SMARTFEED_NO_REDIS=1, failing when SMARTFEED_REDIS_ADDR is unset).
func redisAddr(tb testing.TB) string {
	tb.Helper()
	return testenv.Redis(tb)
}

// env is one test's slice of Redis: a namespace, a client, an admin and a registry.
type env struct {
	tb     testing.TB
	opt    asynq.RedisClientOpt
	ns     string
	reg    *prometheus.Registry
	log    *zap.Logger
	client *Client
	admin  *Admin
	rdb    *redis.Client
}

var nsClean = regexp.MustCompile(`[^a-zA-Z0-9]+`)

func newEnv(tb testing.TB) *env {
	tb.Helper()
	addr := redisAddr(tb)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := nsClean.ReplaceAllString(tb.Name(), "")
	if len(name) > 24 {
		name = name[:24]
	}
	e := &env{tb: tb, opt: asynq.RedisClientOpt{Addr: addr, DB: testDB}, ns: "t" + name + hex.EncodeToString(b),
		reg: prometheus.NewRegistry()}
	if _, ok := tb.(*testing.B); ok {
		e.log = zap.NewNop()
	} else {
		e.log = zaptest.NewLogger(tb, zaptest.Level(zap.WarnLevel))
	}
	e.rdb = redis.NewClient(&redis.Options{Addr: addr, DB: testDB})
	if err := e.rdb.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("redis at %s: %v", addr, err)
	}
	var err error
	if e.client, err = NewClient(e.opt, e.log, e.reg, WithNamespace(e.ns), WithDrainCheck(50*time.Millisecond)); err != nil {
		tb.Fatal(err)
	}
	if e.admin, err = NewAdmin(e.opt, WithNamespace(e.ns)); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.admin.Purge(context.Background()); err != nil {
			tb.Errorf("purge: %v", err)
		}
		e.client.Close()
		e.admin.Close()
		e.rdb.Close()
	})
	return e
}

// config is a fast-polling server config for tests.
func (e *env) config() Config {
	return Config{
		Redis: e.opt, Namespace: e.ns, Concurrency: 4,
		PollInterval: 50 * time.Millisecond, DelayedCheckInterval: 100 * time.Millisecond,
		ShutdownTimeout: 2 * time.Second, RateCheckInterval: 50 * time.Millisecond,
	}
}

// start starts a server with the given handlers; it is shut down when the test ends (Shutdown is
// idempotent for tests that stop it themselves).
func (e *env) start(cfg Config, handlers map[string]Handler) *Server {
	e.tb.Helper()
	s, err := NewServer(cfg, e.log, e.reg)
	if err != nil {
		e.tb.Fatal(err)
	}
	for typ, h := range handlers {
		s.Handle(typ, h)
	}
	if err := s.Start(); err != nil {
		e.tb.Fatal(err)
	}
	var once sync.Once
	e.tb.Cleanup(func() { once.Do(s.Shutdown) })
	return s
}

// waitQueueEmpty waits until queue q holds no pending, active, scheduled, retrying or dead
// task. A task stays active until its handler has returned, so once the queue is empty every run
// has been counted and no copy is left to run again: a count the handlers keep is final.
func (e *env) waitQueueEmpty(tb testing.TB, q string) {
	tb.Helper()
	testenv.WaitFor(tb, testenv.WaitTimeout, "queue "+q+" to empty", func() bool {
		st, err := e.admin.Queue(context.Background(), q)
		return err == nil && st.Pending+st.Active+st.Scheduled+st.Retry+st.Dead == 0
	})
}

// mustTask unwraps a constructor's result in tests whose payloads are valid by construction.
func mustTask(t *Task, err error) *Task {
	if err != nil {
		panic(err)
	}
	return t
}

// value reads a counter or gauge (prometheus/testutil would pull in another module).
func value(tb testing.TB, m prometheus.Metric) float64 {
	tb.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		tb.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	tb.Fatalf("metric %v is neither counter nor gauge", m.Desc())
	return 0
}

// collect returns the metrics of c whose description names name.
func collect(c prometheus.Collector, name string) []prometheus.Metric {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	var out []prometheus.Metric
	for m := range ch {
		if strings.Contains(m.Desc().String(), `"`+name+`"`) {
			out = append(out, m)
		}
	}
	return out
}

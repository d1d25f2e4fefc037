package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
)

const jobsTestDB = 11

func jobs(t *testing.T, addr, ns string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	full := append([]string{"jobs", "--redis-addr", addr, "--redis-db", "11", "--redis-namespace", ns}, args...)
	err := run(t.Context(), full, &out, &out)
	return out.String(), err
}

func TestJobsCommand(t *testing.T) {
	addr := testenv.Redis(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "tjobs" + hex.EncodeToString(b)
	opt := asynq.RedisClientOpt{Addr: addr, DB: jobsTestDB}
	admin, err := pinlater.NewAdmin(opt, pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Purge(context.Background()); admin.Close() })
	client, err := pinlater.NewClient(opt, nil, nil, pinlater.WithNamespace(ns), pinlater.WithDrainCheck(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := t.Context()

	// One task that dies at once.
	task, _ := pinlater.NewRespace(pinlater.RespacePayload{Board: 31})
	info, err := client.Enqueue(ctx, task, pinlater.MaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	srv, err := pinlater.NewServer(pinlater.Config{Redis: opt, Namespace: ns, PollInterval: 50 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleFunc(pinlater.TypeRespace, func(ctx context.Context, tk *pinlater.Task) error {
		if runs.Add(1) == 1 {
			return errors.New("respace blew up")
		}
		return nil
	})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := jobs(t, addr, ns, "dead", "default")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, info.ID) {
			if !strings.Contains(out, "respace blew up") || !strings.Contains(out, "respace") {
				t.Fatalf("dead listing lacks the type or error:\n%s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task never listed as dead:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}

	steps := []struct {
		args []string
		want []string // substrings of the output
	}{
		{[]string{"inspect", "default", info.ID}, []string{"state", "archived", `"board":31`, "respace blew up"}},
		{[]string{"rate", "fanout", "2.5"}, []string{"rate of fanout: 2.5/s"}},
		{[]string{"rate", "bulk", "0"}, []string{"rate of bulk: 0 (paused)"}},
		{[]string{"pause", "critical"}, []string{"paused: critical"}},
		{[]string{"drain", "default"}, []string{"draining: default"}},
		{[]string{"queues"}, []string{"QUEUE", "critical", "paused", "fanout", "2.5/s", "bulk", "0 (paused)"}},
		{[]string{"undrain", "default"}, []string{"undrained: default"}},
		{[]string{"resume", "critical"}, []string{"resumed: critical"}},
		{[]string{"rate", "fanout", "none"}, []string{"rate of fanout: none"}},
		{[]string{"retry", "default", info.ID}, []string{"retried: " + info.ID}},
	}
	for _, s := range steps {
		out, err := jobs(t, addr, ns, s.args...)
		if err != nil {
			t.Fatalf("jobs %v: %v\n%s", s.args, err, out)
		}
		for _, w := range s.want {
			if !strings.Contains(out, w) {
				t.Errorf("jobs %v: output lacks %q:\n%s", s.args, w, out)
			}
		}
	}
	// The queues table: default is draining with one dead task while drain mode was on.
	st, err := admin.Queue(ctx, pinlater.QueueDefault)
	if err != nil || st.Draining {
		t.Fatalf("default after undrain = %+v, %v", st, err)
	}
	// The retried task runs (second run succeeds) and leaves the dead set.
	for runs.Load() < 2 {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatal("retried task did not run")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A task scheduled for later: listed, archived by hand (dead, but it never failed: "-"),
	// then run now.
	later, _ := pinlater.NewRespace(pinlater.RespacePayload{Board: 32})
	linfo, err := client.Enqueue(ctx, later, pinlater.ProcessIn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		args []string
		want []string
	}{
		{[]string{"list", "default", "--state", "scheduled"}, []string{"STATE", linfo.ID, "scheduled"}},
		{[]string{"archive", "default", linfo.ID}, []string{"archived: " + linfo.ID}},
		{[]string{"list", "default", "--state=archived"}, []string{linfo.ID, "archived"}},
		{[]string{"history", "default", "--days", "2"}, []string{"DATE", "PROCESSED", time.Now().UTC().Format(time.DateOnly)}},
	} {
		out, err := jobs(t, addr, ns, s.args...)
		if err != nil {
			t.Fatalf("jobs %v: %v\n%s", s.args, err, out)
		}
		for _, w := range s.want {
			if !strings.Contains(out, w) {
				t.Errorf("jobs %v: output lacks %q:\n%s", s.args, w, out)
			}
		}
	}
	out, err := jobs(t, addr, ns, "dead", "default")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, linfo.ID) {
		t.Errorf("the task archived by hand is not listed as dead:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, linfo.ID) {
			if f := strings.Fields(l); len(f) != 5 || f[3] != "-" || f[4] != "-" {
				t.Errorf("a task archived by hand: want '-' as its failure time and error, got %q", l)
			}
		}
	}
	if out, err := jobs(t, addr, ns, "run", "default", linfo.ID); err != nil || !strings.Contains(out, "queued to run now: "+linfo.ID) {
		t.Errorf("run: %q, %v", out, err)
	}
	if st, err := admin.Task(ctx, "default", linfo.ID); err == nil && st.State == "archived" {
		t.Errorf("after run the task is still archived")
	}
	// delete --all on an empty dead set, and bad input.
	if out, err := jobs(t, addr, ns, "delete", "default", "--all"); err != nil || !strings.Contains(out, "deleted: 0 dead tasks") {
		t.Errorf("delete --all: %q, %v", out, err)
	}
	for _, bad := range [][]string{
		{"rate", "fanout", "-3"},
		{"rate", "fanout", "fast"},
		{"rate", "fanout"},
		{"inspect", "default"},
		{"inspect", "default", "no-such-id"},
		{"retry", "default", "no-such-id"},
		{"dead", "default", "--size", "0"},
		{"pause"},
		{"frobnicate"},
		{"list", "default", "--state", "lost"},
		{"history", "default", "--days", "0"},
		{"run", "default", "no-such-id"},
		{"archive", "default"},
	} {
		if out, err := jobs(t, addr, ns, bad...); err == nil {
			t.Errorf("jobs %v: no error (output %q)", bad, out)
		}
	}
}

func TestJobsHelpNeedsNoRedis(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"jobs"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "rate QUEUE") {
		t.Errorf("help output:\n%s", out.String())
	}
}

// TestFailedAt: a task archived by hand never failed; it shows "-", not the year 1.
func TestFailedAt(t *testing.T) {
	for _, tc := range []struct {
		in   time.Time
		want string
	}{{time.Time{}, "-"}, {time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC), "2026-11-25T10:00:00Z"}} {
		if got := failedAt(tc.in); got != tc.want {
			t.Errorf("failedAt(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestJobsRefusesUnknownQueues: the real binary exits non-zero, saying why, for a queue the
// namespace does not have or a blank queue name, whatever the subcommand, and records no
// setting for such a queue; a standard queue that never held a task can still be paused.
func TestJobsRefusesUnknownQueues(t *testing.T) {
	addr := testenv.Redis(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "tjobsbad" + hex.EncodeToString(b)
	admin, err := pinlater.NewAdmin(asynq.RedisClientOpt{Addr: addr, DB: jobsTestDB}, pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Purge(context.Background()); admin.Close() })
	bin := buildBinary(t)
	smartfeed := func(args ...string) (string, int) {
		t.Helper()
		full := append([]string{"jobs", "--redis-addr", addr, "--redis-db", "11", "--redis-namespace", ns}, args...)
		out, err := exec.Command(bin, full...).CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &ee):
			return string(out), ee.ExitCode()
		}
		t.Fatalf("smartfeed %v: %v", args, err)
		return "", 0
	}
	for _, tc := range []struct {
		args []string
		want string // in the output
	}{
		{[]string{"pause", "no_such_queue"}, "no such queue"},
		{[]string{"resume", "no_such_queue"}, "no such queue"},
		{[]string{"rate", "no_such_queue", "5"}, "no such queue"},
		{[]string{"rate", "no_such_queue", "0"}, "no such queue"},
		{[]string{"drain", "no_such_queue"}, "no such queue"},
		{[]string{"undrain", "no_such_queue"}, "no such queue"},
		{[]string{"retry", "no_such_queue", "--all"}, "no such queue"},
		{[]string{"delete", "no_such_queue", "--all"}, "no such queue"},
		{[]string{"dead", "no_such_queue"}, "no such queue"},
		{[]string{"list", "no_such_queue"}, "no such queue"},
		{[]string{"history", "no_such_queue"}, "no such queue"},
		{[]string{"pause", " "}, "spaces"},
		{[]string{"rate", "\t", "5"}, "spaces"},
		{[]string{"drain", "fan out"}, "spaces"},
	} {
		out, code := smartfeed(tc.args...)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("smartfeed jobs %q: exit %d, output %q; want a non-zero exit saying %q", tc.args, code, out, tc.want)
		}
	}
	rates, err := admin.Rates(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(rates) != 0 {
		t.Errorf("rates recorded for queues that do not exist: %v", rates)
	}
	if _, err := admin.Queue(t.Context(), "no_such_queue"); !errors.Is(err, pinlater.ErrNotFound) {
		t.Errorf("Queue(no_such_queue) = %v, want ErrNotFound", err)
	}
	if out, code := smartfeed("pause", "bulk"); code != 0 || !strings.Contains(out, "paused: bulk") {
		t.Errorf("pause bulk: exit %d, %q", code, out)
	}
	if st, err := admin.Queue(t.Context(), pinlater.QueueBulk); err != nil || !st.Paused {
		t.Errorf("bulk after pause: %+v, %v", st, err)
	}
}

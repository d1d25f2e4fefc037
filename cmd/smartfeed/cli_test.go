package main

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestFlagsAnywhere: a parent's flags may come before or after the subcommand, and the
// SMARTFEED_* twin sets the default a flag overrides: every spelling lists the same queues.
func TestFlagsAnywhere(t *testing.T) {
	addr := testenv.Redis(t)
	ns := "tflags"
	lines := [][]string{
		{"jobs", "--redis-addr", addr, "--redis-db", "11", "--redis-namespace", ns, "queues"},
		{"jobs", "queues", "--redis-addr", addr, "--redis-db", "11", "--redis-namespace", ns},
		{"jobs", "--redis-namespace=" + ns, "queues", "--redis-addr=" + addr, "--redis-db=11"},
		{"jobs", "--redis", addr, "queues", "--db", "11", "--namespace", ns}, // the old spellings
	}
	var want string
	for i, args := range lines {
		var out bytes.Buffer
		if err := run(t.Context(), args, &out, &out); err != nil {
			t.Fatalf("smartfeed %v: %v\n%s", args, err, out.String())
		}
		if i == 0 {
			want = out.String()
			if !strings.Contains(want, "QUEUE") || !strings.Contains(want, "fanout") {
				t.Fatalf("smartfeed %v printed no queue table:\n%s", args, want)
			}
			continue
		}
		if diff := cmp.Diff(want, out.String()); diff != "" {
			t.Errorf("smartfeed %v (-first line +this one):\n%s", args, diff)
		}
	}
	// The environment sets the default; a flag overrides it.
	t.Setenv("SMARTFEED_REDIS_ADDR", addr)
	t.Setenv("SMARTFEED_REDIS_DB", "11")
	t.Setenv("SMARTFEED_REDIS_NAMESPACE", ns)
	var out bytes.Buffer
	if err := run(t.Context(), []string{"jobs", "queues"}, &out, &out); err != nil {
		t.Fatalf("jobs queues from the environment: %v", err)
	}
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("jobs queues from the environment (-flags +env):\n%s", diff)
	}
	t.Setenv("SMARTFEED_REDIS_ADDR", deadAddr(t))
	out.Reset()
	if err := run(t.Context(), []string{"jobs", "queues", "--redis-addr", addr}, &out, &out); err != nil {
		t.Fatalf("--redis-addr over a dead SMARTFEED_REDIS_ADDR: %v", err)
	}
}

// TestConfigFlagsAnywhere needs no Redis: config prints what the flags and twins set.
func TestConfigFlagsAnywhere(t *testing.T) {
	t.Setenv("SMARTFEED_GRPC_ADDR", "127.0.0.1:7001")
	t.Setenv("SMARTFEED_REDIS_ADDR", "env:6379")
	var out bytes.Buffer
	if err := run(t.Context(), []string{"config", "--redis-addr", "flag:6379", "--log-level=debug"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"addr": "flag:6379"`, `"addr": "127.0.0.1:7001"`, `"level": "debug"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("config output lacks %s:\n%s", want, out.String())
		}
	}
}

// TestCompletion: the completion scripts of each shell, and the answers they ask the binary
// for (subcommands, and flags inherited from a parent).
func TestCompletion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"completion", "bash"}, []string{"# bash completion V2 for smartfeed", "__start_smartfeed"}},
		{[]string{"completion", "zsh"}, []string{"#compdef smartfeed"}},
		{[]string{"completion", "fish"}, []string{"complete -c smartfeed"}},
		{[]string{"completion", "powershell"}, []string{"Register-ArgumentCompleter"}},
		{[]string{"__complete", "jo"}, []string{"jobs\t"}},
		{[]string{"__complete", "jobs", ""}, []string{"queues\t", "dead\t", "history\t", "archive\t"}},
		{[]string{"__complete", "jobs", "dead", "--re"}, []string{"--redis-addr\t", "--redis-namespace\t"}},
		{[]string{"__complete", "all", "--wait"}, []string{"--wait-for-deps\t"}},
	} {
		var out, errOut bytes.Buffer
		if err := run(t.Context(), tc.args, &out, &errOut); err != nil {
			t.Errorf("smartfeed %v: %v", tc.args, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("smartfeed %v: output lacks %q:\n%s", tc.args, w, out.String())
			}
		}
	}
}

// TestVersion: version and --version print the same line.
func TestVersion(t *testing.T) {
	var a, b bytes.Buffer
	if err := run(t.Context(), []string{"version"}, &a, &a); err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), []string{"--version"}, &b, &b); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a.String(), b.String()); diff != "" || !strings.HasPrefix(a.String(), "smartfeed ") {
		t.Errorf("version %q, --version %q", a.String(), b.String())
	}
}

// deadAddr is a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestJobsWithoutRedisNamesTheFix: jobs pointed at an address where no Redis listens, by flag or
// by its SMARTFEED_* twin, fails naming the address and the ways to fix it (the flag, its twin,
// scripts/redis.sh up), whatever the subcommand. It needs no Redis.
func TestJobsWithoutRedisNamesTheFix(t *testing.T) {
	dead := deadAddr(t)
	cases := []struct {
		name string
		args []string
		env  string
	}{
		{"queues, flag", []string{"jobs", "queues", "--redis-addr", dead}, ""},
		{"queues, environment", []string{"jobs", "queues"}, dead},
		{"pause, flag", []string{"jobs", "--redis-addr", dead, "pause", "critical"}, ""},
		{"list, environment", []string{"jobs", "list", "fanout"}, dead},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("SMARTFEED_REDIS_ADDR", c.env)
			var out bytes.Buffer
			err := run(t.Context(), c.args, &out, &out)
			if err == nil {
				t.Fatalf("smartfeed %v with no Redis at %s: no error\n%s", c.args, dead, out.String())
			}
			for _, want := range []string{dead, "--redis-addr", "SMARTFEED_REDIS_ADDR", "scripts/redis.sh up"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("smartfeed %v: error does not name %q:\n%v", c.args, want, err)
				}
			}
		})
	}
}

package main

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/internal/config"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
)

// fakeFeedAdmin answers GetHedgePolicy with the default policy and records SetHedgePolicy.
type fakeFeedAdmin struct {
	feedv1.UnimplementedFeedAdminServer
	mu   sync.Mutex
	sets []hedge.Policy
}

func (f *fakeFeedAdmin) GetHedgePolicy(context.Context, *feedv1.GetHedgePolicyRequest) (*feedv1.HedgePolicy, error) {
	return feedsvc.HedgePolicyProto(hedge.DefaultPolicy(), 0), nil
}

func (f *fakeFeedAdmin) SetHedgePolicy(_ context.Context, in *feedv1.HedgePolicy) (*feedv1.HedgePolicy, error) {
	p, err := feedsvc.HedgePolicyFromProto(in, hedge.DefaultPolicy())
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.sets = append(f.sets, p)
	f.mu.Unlock()
	return in, nil
}

func (f *fakeFeedAdmin) set() []hedge.Policy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]hedge.Policy(nil), f.sets...)
}

// TestHedgeSetRefuses: `hedge set` refuses a cutoff that is no cutoff (0, past 10 s, at or past
// the primary timeout) before it sends anything, and takes its values from the command line only
// (SMARTFEED_MODE and the like left in a shell do not reach the live policy).
func TestHedgeSetRefuses(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &fakeFeedAdmin{}
	feedv1.RegisterFeedAdminServer(srv, fake)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn := []string{"--admin-grpc-addr", l.Addr().String(), "--admin-addr", "127.0.0.1:1"}

	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string // error text; "" = accepted
		sent func(hedge.Policy) string
	}{
		{name: "cutoff 0s", args: []string{"--cutoff", "0s"}, want: "--cutoff 0s: want a duration in (0, 10s]"},
		{name: "cutoff 2h", args: []string{"--cutoff", "2h"}, want: "--cutoff 2h0m0s: want a duration in (0, 10s]"},
		{name: "cutoff at the primary timeout", args: []string{"--cutoff", "1s"}, want: "delay 1s in fixed mode is not below the primary timeout 1s"},
		{name: "mode fixed with no cutoff", args: []string{"--mode", "fixed", "--cutoff", "-5ms"}, want: "--cutoff -5ms"},
		{name: "budget over 1", args: []string{"--budget", "2"}, want: "budget 2 is not in [0, 1]"},
		{name: "SMARTFEED_MODE left set", args: []string{"--budget", "0.05"}, env: map[string]string{"SMARTFEED_MODE": "off", "SMARTFEED_CUTOFF": "5ms"},
			sent: func(p hedge.Policy) string {
				if p.Mode != hedge.DefaultPolicy().Mode || p.Delay != hedge.DefaultPolicy().Delay || p.Budget != 0.05 {
					return "the environment changed the policy"
				}
				return ""
			}},
		{name: "cutoff 7ms", args: []string{"--cutoff", "7ms"},
			sent: func(p hedge.Policy) string {
				if p.Mode != hedge.ModeFixed || p.Delay != 7*time.Millisecond {
					return "not fixed 7ms"
				}
				return ""
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(fake.set())
			root := newRootCmd(func(k string) string { return tt.env[k] }, io.Discard, io.Discard)
			root.SetArgs(append(append([]string{"hedge", "set"}, tt.args...), conn...))
			err := root.ExecuteContext(t.Context())
			sets := fake.set()[before:]
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("hedge set %v: error %v, want one containing %q", tt.args, err, tt.want)
				}
				if len(sets) != 0 {
					t.Errorf("a refused hedge set sent %+v", sets)
				}
				return
			}
			if err != nil {
				t.Fatalf("hedge set %v: %v", tt.args, err)
			}
			if len(sets) != 1 {
				t.Fatalf("hedge set sent %d policies, want 1", len(sets))
			}
			if msg := tt.sent(sets[0]); msg != "" {
				t.Errorf("sent %+v: %s", sets[0], msg)
			}
		})
	}
}

// TestConfigRefusesWhatStartRefuses: `smartfeed config` and the servers resolve the
// configuration through one function, and what a start would refuse, config refuses, naming the
// field.
func TestConfigRefusesWhatStartRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"feed max items by flag", []string{"--feed-max-items", "2000000000"}, nil, "feed.max_items: 2000000000 is not in [1, 1048576]"},
		{"feed max items by env", nil, map[string]string{"SMARTFEED_FEED_MAX_ITEMS": "2000000000"}, "feed.max_items"},
		{"feed max items as 2e9", []string{"--feed-max-items", "2e9"}, nil, `invalid argument "2e9" for "--feed-max-items"`},
		{"generator deadline", []string{"--feed-generator-deadline", "5m"}, nil, "feed.generator_deadline: 5m0s is not in (0, 1m]"},
		{"worker shutdown longer than the whole", []string{"--worker-shutdown-timeout", "1m", "--shutdown-timeout", "30s"}, nil,
			"worker.shutdown_timeout: 1m0s is longer than shutdown_timeout 30s"},
		{"hedge cutoff 0", []string{"--hedge-mode", "fixed", "--hedge-delay", "0s"}, nil, "feed.hedge: hedge policy: delay 0 in fixed mode"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			for _, cmd := range []string{"config", "all"} {
				root := newRootCmd(getenv, io.Discard, io.Discard)
				root.SetArgs(append([]string{cmd, "--data-dir", t.TempDir(), "--admin-addr", "", "--admin-grpc-addr", ""}, tt.args...))
				err := root.ExecuteContext(t.Context())
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("smartfeed %s %v: error %v, want one containing %q", cmd, tt.args, err, tt.want)
				}
			}
		})
	}
	// Every value config.Validate accepts for the feed is accepted by the feed service.
	for _, n := range []int{1, config.MaxFeedItems} {
		c := config.DefaultConfig()
		c.Feed.MaxItems = n
		if err := c.Validate(); err != nil {
			t.Errorf("max items %d: config: %v", n, err)
		}
		if err := checkConfig(c); err != nil {
			t.Errorf("max items %d: feed service: %v", n, err)
		}
	}
}

// TestKnownEnv: every flag twin of the command tree, and the variables read beside the flags,
// raise no warning; a misspelled one and one only a no-env flag would have named do.
func TestKnownEnv(t *testing.T) {
	root := newRootCmd(func(string) string { return "" }, io.Discard, io.Discard)
	var environ []string
	walkCommands(root, func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if name, ok := config.EnvTwin(f); ok {
				environ = append(environ, name+"=1")
			}
		})
	})
	environ = append(environ, "SMARTFEED_REDIS_PASSWORD=x", "SMARTFEED_CONFIG=f", "SMARTFEED_HBASE_ZK=zk:2181")
	var out strings.Builder
	warnUnknownEnv(root, environ, &out)
	if out.Len() != 0 {
		t.Errorf("warnings for variables something reads:\n%s", out.String())
	}
	out.Reset()
	warnUnknownEnv(root, []string{"SMARTFEED_REDIS_ADR=x", "SMARTFEED_MODE=off"}, &out)
	want := "smartfeed: warning: environment variable \"SMARTFEED_MODE\" is set, but smartfeed reads no such variable\n" +
		"smartfeed: warning: environment variable \"SMARTFEED_REDIS_ADR\" is set, but smartfeed reads no such variable; did you mean SMARTFEED_REDIS_ADDR?\n"
	if out.String() != want {
		t.Errorf("warnings:\n%s\nwant:\n%s", out.String(), want)
	}
}

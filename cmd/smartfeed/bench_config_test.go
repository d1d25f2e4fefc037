package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/internal/config"
)

// The main bench system listens where the flags say (a trace is taken from it at a known
// address); the scale curve's systems, started while it still listens, take ports the kernel
// picks, so a fixed --admin-addr does not make them fail to bind.
func TestBenchSystemConfigAddresses(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.GRPC.Addr, cfg.Admin.Addr, cfg.Admin.GRPCAddr = "127.0.0.1:7000", "127.0.0.1:6061", "127.0.0.1:6062"
	type addrs struct{ GRPC, Admin, AdminGRPC string }
	for _, tc := range []struct {
		tag       string
		adminGRPC string
		want      addrs
	}{
		{tag: "", adminGRPC: "127.0.0.1:6062", want: addrs{"127.0.0.1:7000", "127.0.0.1:6061", "127.0.0.1:6062"}},
		{tag: "10000", adminGRPC: "127.0.0.1:6062", want: addrs{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}},
		{tag: "10000", adminGRPC: "", want: addrs{"127.0.0.1:0", "127.0.0.1:0", ""}},
	} {
		in := cfg
		in.Admin.GRPCAddr = tc.adminGRPC
		c := benchSystemConfig(in, tc.tag)
		if diff := cmp.Diff(tc.want, addrs{c.GRPC.Addr, c.Admin.Addr, c.Admin.GRPCAddr}); diff != "" {
			t.Errorf("tag %q: addresses (-want +got):\n%s", tc.tag, diff)
		}
		if !strings.HasPrefix(c.Redis.Namespace, "bench"+tc.tag) || c.Redis.Namespace == cfg.Redis.Namespace {
			t.Errorf("tag %q: namespace %q, want one of its own led by bench%s", tc.tag, c.Redis.Namespace, tc.tag)
		}
	}
}

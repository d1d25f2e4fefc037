package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestConfigCheckListsWhatAllRefuses: for each setting `smartfeed all` stops at when it starts,
// `smartfeed config --check` with the same flags fails and names the flag, its environment twin
// and its config file key; `all` itself refuses the same flags (so the check says no more and
// no less than the start); and with every problem at once, --check lists them all.
func TestConfigCheckListsWhatAllRefuses(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	cert, key := ca.issue(t, dir, "server", 2)
	caFile := filepath.Join(dir, "ca.pem")
	aFile := filepath.Join(dir, "a-file")
	shortToken := filepath.Join(dir, "short-token")
	for f, b := range map[string][]byte{caFile: ca.pem, aFile: []byte("x"), shortToken: []byte("short\n")} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	missing := filepath.Join(dir, "missing")

	cases := []struct {
		name    string
		args    []string
		want    []string // in --check's line for the problem
		n       int      // problems listed
		allSays string   // in the error of `all` with the same flags
	}{
		{"public port open without authentication and TLS", []string{"--grpc-addr", "0.0.0.0:0"},
			[]string{"without authentication", "flag --auth-jwks-file, environment SMARTFEED_AUTH_JWKS_FILE, config file key auth.jwks_file",
				"without TLS", "flag --tls-cert-file", "flag --insecure"}, 2, "open to the network without authentication"},
		{"public port taken", []string{"--grpc-addr", taken.Addr().String()},
			[]string{"address already in use", "flag --grpc-addr, environment SMARTFEED_GRPC_ADDR, config file key grpc.addr"}, 1, "address already in use"},
		{"admin gRPC port taken", []string{"--admin-grpc-addr", taken.Addr().String()},
			[]string{"admin gRPC address", "flag --admin-grpc-addr"}, 1, "address already in use"},
		{"TLS certificate without key", []string{"--tls-cert-file", cert},
			[]string{"without its key", "flag --tls-key-file, environment SMARTFEED_TLS_KEY_FILE, config file key tls.key_file"}, 1, "both --tls-cert-file and --tls-key-file"},
		{"TLS files missing", []string{"--tls-cert-file", missing, "--tls-key-file", missing},
			[]string{"cannot be loaded", "flag --tls-cert-file"}, 1, "tls certificate"},
		{"TLS key that is not the certificate's", []string{"--tls-cert-file", cert, "--tls-key-file", caFile},
			[]string{"cannot be loaded", "flag --tls-key-file"}, 1, "tls key pair"},
		{"client CA without a certificate", []string{"--tls-client-ca-file", caFile},
			[]string{"mTLS", "flag --tls-cert-file"}, 1, "a client CA file without a certificate"},
		{"client CA file without PEM", []string{"--tls-cert-file", cert, "--tls-key-file", key, "--tls-client-ca-file", aFile},
			[]string{"no PEM certificate", "flag --tls-client-ca-file"}, 1, "no PEM certificate"},
		{"JWKS missing", []string{"--auth-jwks-file", missing},
			[]string{"JWKS cannot be loaded", "flag --auth-jwks-file"}, 1, "no such file"},
		{"admin token too short", []string{"--admin-token-file", shortToken},
			[]string{"at least 16 characters", "flag --admin-token-file, environment SMARTFEED_ADMIN_TOKEN_FILE, config file key admin.token_file"}, 1, "at least 16 characters"},
		{"admin gRPC off loopback without a token", []string{"--admin-grpc-addr", "0.0.0.0:0"},
			[]string{"has no token", "flag --admin-token-file", "no TLS", "flag --tls-cert-file"}, 2, "has no --admin-token-file"},
		{"data directory under a file", []string{"--data-dir", filepath.Join(aFile, "data")},
			[]string{"data directory", "flag --data-dir, environment SMARTFEED_DATA_DIR, config file key storage.data_dir"}, 1, "--data-dir"},
		{"generator config missing", []string{"--generator-config", missing},
			[]string{"generator config", "flag --generator-config"}, 1, "generator config"},
	}
	// Loopback ports of the test's own and a data directory of its own, so that each case
	// has the one problem it adds.
	base := func(t *testing.T) []string {
		return []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--admin-grpc-addr", "127.0.0.1:0",
			"--data-dir", t.TempDir(), "--pebble-no-sync"}
	}
	check := func(args []string) (string, error) {
		var out strings.Builder
		root := newRootCmd(func(string) string { return "" }, &out, io.Discard)
		root.SetArgs(append([]string{"config", "--check"}, args...))
		err := root.ExecuteContext(t.Context())
		if err != nil {
			return err.Error(), err
		}
		return out.String(), nil
	}
	if out, err := check(base(t)); err != nil || !strings.Contains(out, "config ok") {
		t.Fatalf("config --check of the test's base: %q, %v; want config ok", out, err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append(base(t), tc.args...)
			out, err := check(args)
			if err == nil {
				t.Fatalf("config --check %v passed: %s", tc.args, out)
			}
			if n := strings.Count(out, "\n  - "); n != tc.n {
				t.Errorf("config --check %v: %d problems, want %d:\n%s", tc.args, n, tc.n, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("config --check %v does not say %q:\n%s", tc.args, w, out)
				}
			}
			t.Run("all refuses it too", func(t *testing.T) {
				// `all` checks its Redis before the rest: a real one, in a namespace of each
				// case's own (a namespace belongs to one deployment, and each case is a new one).
				// A bounded wait: if it served, it is stopped and the case fails.
				redis, ns := testenv.RedisNamespace(t, "cfgcheck")
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				root := newRootCmd(func(string) string { return "" }, io.Discard, io.Discard)
				root.SetArgs(append(append([]string{"all"}, args...), "--redis-addr", redis, "--redis-namespace", ns))
				err := root.ExecuteContext(ctx)
				if err == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
					t.Fatalf("smartfeed all %v: %v; want it refused at start, as config --check said", tc.args, err)
				}
				if !strings.Contains(err.Error(), tc.allSays) {
					t.Errorf("smartfeed all %v: %v; want the refusal for %q", tc.args, err, tc.allSays)
				}
			})
		})
	}
	// Everything at once: each problem listed, not only the first.
	out, err := check(append(base(t), "--grpc-addr", "0.0.0.0:0", "--tls-cert-file", cert, "--tls-client-ca-file", aFile,
		"--auth-jwks-file", missing, "--admin-grpc-addr", "0.0.0.0:0", "--admin-token-file", shortToken,
		"--data-dir", filepath.Join(aFile, "data"), "--generator-config", missing, "--log-level", "loud"))
	if err == nil {
		t.Fatal("config --check with every problem passed")
	}
	want := []string{"flag --tls-key-file", "flag --tls-client-ca-file", "flag --auth-jwks-file", "flag --admin-token-file",
		"flag --data-dir", "flag --generator-config", "flag --log-level"}
	if n := strings.Count(out, "\n  - "); n != len(want) {
		t.Errorf("config --check listed %d problems, want %d:\n%s", n, len(want), out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("config --check with every problem does not name %s:\n%s", w, out)
		}
	}
}

// TestConfigCheckTracing: a tracing variable the process would refuse at start (an exporter it
// does not have) is listed by config --check, and `all` refuses to start with it.
func TestConfigCheckTracing(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	var out strings.Builder
	root := newRootCmd(func(string) string { return "" }, &out, io.Discard)
	root.SetArgs([]string{"config", "--check", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--admin-grpc-addr", "127.0.0.1:0", "--data-dir", t.TempDir()})
	err := root.ExecuteContext(t.Context())
	if err == nil || !strings.Contains(err.Error(), `tracing: OTEL_TRACES_EXPORTER "zipkin": want otlp or none`) {
		t.Errorf("config --check with OTEL_TRACES_EXPORTER=zipkin: %v (%s); want the tracing problem", err, out.String())
	}
	redis, ns := testenv.RedisNamespace(t, "cfgtrace")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	root = newRootCmd(func(string) string { return "" }, io.Discard, io.Discard)
	root.SetArgs([]string{"all", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--admin-grpc-addr", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--redis-addr", redis, "--redis-namespace", ns})
	if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Errorf("smartfeed all with OTEL_TRACES_EXPORTER=zipkin: %v; want it refused at start", err)
	}
}

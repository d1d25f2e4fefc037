package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/smartfeed/smartfeed/auth"
	"github.com/smartfeed/smartfeed/generator"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/quote"
	"github.com/smartfeed/smartfeed/internal/tracing"
)

// checkProblem is one thing `smartfeed all` would refuse at start, with the setting to change.
type checkProblem struct {
	msg   string
	where string // the flag, its environment twin and the config file field
}

func (p checkProblem) String() string { return p.msg + " (" + p.where + ")" }

// setting names a configuration field the three ways it can be set: its flag, the flag's
// environment twin and its key in the --config file.
func setting(flag, field string) string {
	return fmt.Sprintf("flag --%s, environment %s, config file key %s", flag, config.EnvName(flag), field)
}

// addProblem records a problem found at where (see setting), its message formatted as by fmt.Sprintf.
type addProblem func(where, format string, args ...any)

// startChecks returns every problem `smartfeed all` would stop at with cfg, beyond what
// config.Validate refuses: the listeners it binds, the TLS, JWKS and admin token files it
// reads, the exposure rules of its ports (docs/security.md), the Pebble data directory, the
// generator config file and the tracing variables. It reads files and binds each listen
// address for an instant, and creates nothing; it does not dial Redis or HBase (a process
// started before them waits for them with --wait-for-deps).
func startChecks(cfg config.Config) []checkProblem {
	var ps []checkProblem
	add := func(where, f string, a ...any) { ps = append(ps, checkProblem{fmt.Sprintf(f, a...), where}) }
	checkListeners(cfg, add)
	checkTLS(cfg, add)
	checkAuth(cfg, add)
	checkAdminGRPC(cfg, add)
	checkFiles(cfg, add)
	checkTracing(os.Getenv, add)
	return ps
}

// checkTracing checks the OTEL_* variables that configure tracing (package tracing), which the
// roles read from the environment at start.
func checkTracing(getenv func(string) string, add addProblem) {
	if _, err := tracing.FromEnv(getenv); err != nil {
		add("environment OTEL_*, docs/operations.md \"Tracing\"", "tracing: %v", err)
	}
}

// checkListeners checks that each listen address is host:port, used by one listener only, and
// can be bound (for an instant).
func checkListeners(cfg config.Config, add addProblem) {
	type listener struct{ addr, what, flag, field string }
	lis := []listener{
		{cfg.GRPC.Addr, "public gRPC", "grpc-addr", "grpc.addr"},
		{cfg.Admin.Addr, "admin HTTP", "admin-addr", "admin.addr"},
		{cfg.Admin.GRPCAddr, "admin gRPC", "admin-grpc-addr", "admin.grpc_addr"},
	}
	seen := map[string]string{}
	for _, l := range lis {
		if l.addr == "" {
			continue
		}
		_, port, err := net.SplitHostPort(l.addr)
		if err != nil {
			add(setting(l.flag, l.field), "the %s address %s is not host:port: %v", l.what, quote.Q(l.addr), err)
			continue
		}
		if other, dup := seen[l.addr]; dup && port != "0" {
			add(setting(l.flag, l.field), "the %s address %s is also the %s address", l.what, quote.Q(l.addr), other)
			continue
		}
		seen[l.addr] = l.what
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			add(setting(l.flag, l.field), "the %s address %s cannot be bound: %v", l.what, quote.Q(l.addr), err)
			continue
		}
		_ = ln.Close()
	}
}

// checkTLS checks the TLS files: a certificate and its key together, both loadable; a client
// CA (mTLS) needs them; the CA files (client, generator) load.
func checkTLS(cfg config.Config, add addProblem) {
	t := cfg.TLS
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		add(setting("tls-key-file", "tls.key_file"), "a TLS certificate without its key")
	case t.CertFile == "" && t.KeyFile != "":
		add(setting("tls-cert-file", "tls.cert_file"), "a TLS key without its certificate")
	case t.CertFile != "":
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			add(setting("tls-cert-file", "tls.cert_file")+"; "+setting("tls-key-file", "tls.key_file"),
				"the TLS certificate and key cannot be loaded: %v", err)
		}
	}
	if t.ClientCAFile != "" {
		if t.CertFile == "" {
			add(setting("tls-cert-file", "tls.cert_file"), "a TLS client CA file (mTLS) without a certificate and key")
		}
		if _, err := loadPool(t.ClientCAFile); err != nil {
			add(setting("tls-client-ca-file", "tls.client_ca_file"), "%v", err)
		}
	}
	if cfg.Generator.CAFile != "" {
		if _, err := loadPool(cfg.Generator.CAFile); err != nil {
			add(setting("generator-ca-file", "generator.ca_file"), "%v", err)
		}
	}
}

// checkAuth checks authentication of the public port: the JWKS loads, and a public port open to
// the network has it and TLS, or --insecure.
func checkAuth(cfg config.Config, add addProblem) {
	if f := cfg.Auth.JWKSFile; f != "" {
		if _, err := auth.NewVerifier(f, cfg.Auth.Issuer, cfg.Auth.Audience, nil); err != nil {
			add(setting("auth-jwks-file", "auth.jwks_file"), "the JWKS cannot be loaded: %v", err)
		}
	}
	if cfg.GRPC.Addr != "" && !loopback(cfg.GRPC.Addr) && !cfg.Auth.Insecure {
		if cfg.Auth.JWKSFile == "" {
			add(setting("auth-jwks-file", "auth.jwks_file")+"; or "+setting("insecure", "auth.insecure"),
				"the public gRPC port %s is open to the network without authentication", quote.Q(cfg.GRPC.Addr))
		}
		if cfg.TLS.CertFile == "" {
			add(setting("tls-cert-file", "tls.cert_file")+"; or "+setting("insecure", "auth.insecure"),
				"the public gRPC port %s is open to the network without TLS", quote.Q(cfg.GRPC.Addr))
		}
	}
}

// checkAdminGRPC checks the admin gRPC port: a token of 16 characters or more, required off
// loopback, with TLS.
func checkAdminGRPC(cfg config.Config, add addProblem) {
	if a := cfg.Admin.GRPCAddr; a != "" {
		if f := cfg.Admin.TokenFile; f != "" {
			b, err := os.ReadFile(f)
			switch {
			case err != nil:
				add(setting("admin-token-file", "admin.token_file"), "the admin token file cannot be read: %v", err)
			case len(strings.TrimSpace(string(b))) < 16:
				add(setting("admin-token-file", "admin.token_file"), "the admin token must be at least 16 characters")
			}
		} else if !loopback(a) {
			add(setting("admin-token-file", "admin.token_file"), "the admin gRPC port %s is not on loopback and has no token", quote.Q(a))
		}
		if !loopback(a) && cfg.TLS.CertFile == "" && !cfg.Auth.Insecure {
			add(setting("tls-cert-file", "tls.cert_file"), "the admin gRPC port %s is not on loopback and has no TLS: its credential would travel in clear", quote.Q(a))
		}
	}
}

// checkFiles checks what the stores and the generator read at start: the Pebble directory can
// be created and written, the generator config file loads.
func checkFiles(cfg config.Config, add addProblem) {
	if cfg.Storage.Backend == config.BackendPebble && cfg.Storage.DataDir != "" {
		if err := canCreateDir(cfg.Storage.DataDir); err != nil {
			add(setting("data-dir", "storage.data_dir"), "the data directory %s cannot hold the stores: %v", quote.Q(cfg.Storage.DataDir), err)
		}
	}
	if f := cfg.Generator.ConfigFile; f != "" {
		if _, err := generator.LoadConfig(f); err != nil {
			add(setting("generator-config", "generator.config_file"), "the generator config %s: %v", quote.Q(f), err)
		}
	}
}

// canCreateDir reports why dir cannot be a directory this process writes in: a part of its
// path that is not a directory, or the nearest existing directory not writable. It creates
// nothing.
func canCreateDir(dir string) error {
	p := filepath.Clean(dir)
	for {
		st, err := os.Stat(p)
		switch {
		case err == nil && !st.IsDir():
			return fmt.Errorf("%s is not a directory", quote.Q(p))
		case err == nil:
			if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
				return fmt.Errorf("%s is not writable: %w", quote.Q(p), err)
			}
			return nil
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("no existing directory above %s", quote.Q(dir))
		}
		p = parent
	}
}

package config

import "github.com/smartfeed/smartfeed/internal/jsontime"

// Admin is the operator's plane.
type Admin struct {
	// Addr is the HTTP listen address (metrics, health, pprof when enabled); loopback by
	// default. Default "127.0.0.1:9091".
	Addr string `json:"addr"`
	// GRPCAddr is the admin gRPC listen address (FeedAdmin: hedging, faults, service config),
	// never the public port; loopback by default. Empty turns it off. Default "127.0.0.1:9092".
	GRPCAddr string `json:"grpc_addr"`
	// TokenFile holds the admin credential (a bearer token) the admin gRPC port requires.
	// Empty: the admin gRPC port must be on loopback and takes calls without one.
	TokenFile string `json:"token_file"`
	// CAFile is the CA certificate (PEM) the admin commands (smartfeed hedge, smartfeed shards
	// move) verify the admin gRPC and HTTP ports' TLS certificate against. Empty: they dial in
	// plaintext, as a loopback admin port without --tls-cert-file serves. Default empty.
	CAFile string `json:"ca_file"`
	// ServerName is the name the admin commands verify the admin port's certificate for, when
	// it is not the host they dial (a port-forward to 127.0.0.1). Default empty: that host.
	ServerName string `json:"server_name"`
	// Pprof serves /debug/pprof on the admin HTTP listener. Default false.
	Pprof bool `json:"pprof"`
	// SlowTraceDir, when set, keeps the last seconds of the process's execution trace in
	// memory (Go's flight recorder) and writes them there when a public gRPC call takes longer
	// than SlowTraceOver, at most one every 10 s and 50 in all (package slowtrace). Empty: off.
	SlowTraceDir string `json:"slow_trace_dir"`
	// SlowTraceOver is the bound of SlowTraceDir. Default 100ms.
	SlowTraceOver jsontime.Duration `json:"slow_trace_over"`
}

package main

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/console"
	"github.com/smartfeed/smartfeed/pinlater/queueadmin"
)

// registerQueueAdmin serves QueueAdmin (package queueadmin: the queues of `smartfeed jobs`,
// over gRPC) on the admin gRPC server, next to FeedAdmin and under the same credential and
// audit log. A process without the admin gRPC server (no feed role, or --admin-grpc-addr "")
// does not serve it.
func (a *app) registerQueueAdmin() {
	if a.adminGRPC != nil && a.pinAdmin != nil {
		queueadmin.Register(a.adminGRPC, queueadmin.New(a.pinAdmin))
	}
}

// mountConsole mounts the web console (package console) on the admin HTTP mux, at
// /console/. Its JSON calls go through the same gRPC servers as any client's, so the public
// port's authentication and the admin port's credential apply unchanged; what this adds is
// the rule of which server may be reached from the admin HTTP listener at all:
//
//   - the public services when that listener is on loopback, or when the public port
//     authenticates (--auth-jwks-file) and the listener has TLS, or with --insecure;
//   - FeedAdmin when that listener is on loopback, or when the admin port requires its
//     credential (--admin-token-file) and the listener has TLS (or --insecure): a credential
//     never travels in clear, and an admin port left open on loopback is not opened to the
//     network through the console.
func (a *app) mountConsole(mux *http.ServeMux) {
	local := loopback(a.cfg.Admin.Addr)
	secure := a.cfg.TLS.CertFile != "" || a.cfg.Auth.Insecure
	var opts console.Options
	if local || (a.cfg.Auth.JWKSFile != "" && secure) || a.cfg.Auth.Insecure {
		opts.Public = a.grpc
	}
	if a.adminGRPC != nil && (local || (a.cfg.Admin.TokenFile != "" && secure)) {
		opts.Admin = a.adminGRPC
	}
	h, err := console.New(opts)
	if err != nil {
		a.log.Warn("web console not mounted", zap.Error(err))
		return
	}
	mux.Handle(console.Prefix, h)
	a.log.Debug("web console mounted", zap.String("path", console.Prefix),
		zap.Bool("public", opts.Public != nil), zap.Bool("admin", opts.Admin != nil))
}

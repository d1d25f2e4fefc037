package main

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/console"
	"github.com/smartfeed/smartfeed/internal/config"
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

// consoleReach says which gRPC servers the web console on the admin HTTP listener may forward
// to. Its calls go through those servers with their interceptors, so the public port's
// authentication and the admin port's credential apply unchanged; what is decided here is
// whether a server may be reached from that listener at all. The rule: the console never makes
// a port reachable from further than the port itself is. On a loopback listener it reaches
// both; on a listener open to the network it reaches a server only when that server listens off
// loopback too, which newApp and buildAdminGRPC allow only with its protection (the public
// port: authentication and TLS, or --insecure; the admin port: its credential and TLS, or
// --insecure). Every listener shares the TLS configuration, so a credential the console relays
// travels as protected as on the port itself.
func consoleReach(cfg config.Config) (public, admin bool) {
	local := loopback(cfg.Admin.Addr)
	public = local || !loopback(cfg.GRPC.Addr)
	admin = local || (cfg.Admin.GRPCAddr != "" && !loopback(cfg.Admin.GRPCAddr))
	return public, admin
}

// mountConsole mounts the web console (package console) on the admin HTTP mux, at
// /console/, forwarding to the servers consoleReach allows.
func (a *app) mountConsole(mux *http.ServeMux) {
	public, admin := consoleReach(a.cfg)
	var opts console.Options
	if public {
		opts.Public = a.grpc
	}
	if admin && a.adminGRPC != nil {
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

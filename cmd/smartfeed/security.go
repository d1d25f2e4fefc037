package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/smartfeed/smartfeed/auth"
	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/graphsvc/shardadmin"
	"github.com/smartfeed/smartfeed/internal/quote"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	shardv1 "github.com/smartfeed/smartfeed/proto/shard/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// loopback reports whether a listen address binds only the loopback interface ("" and
// ":port" bind every interface).
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// publicInterceptors returns the authentication and authorization interceptors of the public
// port (none when authentication is off, which newApp allows only on loopback or --insecure).
func (a *app) publicInterceptors() ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor, error) {
	ac := a.cfg.Auth
	if !loopback(a.cfg.GRPC.Addr) {
		var missing []string
		if ac.JWKSFile == "" {
			missing = append(missing, "authentication (--auth-jwks-file)")
		}
		if a.cfg.TLS.CertFile == "" {
			missing = append(missing, "TLS (--tls-cert-file, --tls-key-file)")
		}
		if len(missing) > 0 {
			if !ac.Insecure {
				return nil, nil, fmt.Errorf("the public gRPC port %s is open to the network without %s: configure it (docs/security.md), listen on loopback, or pass --insecure",
					a.cfg.GRPC.Addr, strings.Join(missing, " and "))
			}
			a.log.Warn("INSECURE: the public gRPC port is open to the network without "+strings.Join(missing, " and ")+" (--insecure)",
				zap.String("grpc", a.cfg.GRPC.Addr))
		}
	}
	if ac.JWKSFile == "" {
		return nil, nil, nil
	}
	v, err := auth.NewVerifier(ac.JWKSFile, ac.Issuer, ac.Audience, nil, auth.WithMaxLifetime(ac.MaxTokenLifetime.D()))
	if err != nil {
		return nil, nil, err
	}
	var owners auth.Owners
	if a.graph != nil {
		owners = graphOwners{a.graph}
	}
	authz, err := auth.NewAuthorizer(v, owners, a.log.Named("auth"), a.reg)
	if err != nil {
		return nil, nil, err
	}
	units := []grpc.UnaryServerInterceptor{authz.Unary()}
	if ac.UserRate > 0 || ac.ProducerRate > 0 {
		rdb := redisClient(a.cfg.Redis)
		a.conns = append(a.conns, rdb)
		rl, err := auth.NewRateLimiter(rdb, "smartfeed:rl:"+a.cfg.Redis.Namespace+":", auth.Limits{
			User:     auth.Limit{PerSecond: ac.UserRate, Burst: ac.UserBurst},
			Producer: auth.Limit{PerSecond: ac.ProducerRate, Burst: ac.ProducerBurst},
		}, a.log.Named("ratelimit"), a.reg)
		if err != nil {
			return nil, nil, err
		}
		units = append(units, rl.Unary())
	}
	return units, []grpc.StreamServerInterceptor{authz.Stream()}, nil
}

// graphOwners resolves a board's owner from the graph.
type graphOwners struct{ g *zen.Graph }

func (o graphOwners) Owner(ctx context.Context, id zen.ID) (zen.ID, error) {
	obj, err := o.g.Get(ctx, id)
	if err != nil {
		return 0, err
	}
	owner, ok := zen.DataID(obj.Data, "owner")
	if !ok {
		return 0, fmt.Errorf("object %d has no owner: %w", id, zen.ErrNotFound)
	}
	return owner, nil
}

// buildAdminGRPC builds the admin gRPC server (FeedAdmin with the feed role, ShardAdmin with
// routed stores) on its own listener. Without an admin token it must listen on loopback.
func (a *app) buildAdminGRPC() error {
	addr := a.cfg.Admin.GRPCAddr
	if addr == "" || (a.feed == nil && a.router == nil) {
		return nil
	}
	token := ""
	if f := a.cfg.Admin.TokenFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("admin token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if len(token) < 16 {
			return errors.New("admin token file: the token must be at least 16 characters")
		}
	} else if !loopback(addr) {
		return fmt.Errorf("the admin gRPC port %s is not on loopback and has no --admin-token-file", addr)
	}
	if !loopback(addr) && a.cfg.TLS.CertFile == "" && !a.cfg.Auth.Insecure {
		return fmt.Errorf("the admin gRPC port %s is not on loopback and has no TLS (--tls-cert-file): its credential would travel in clear", addr)
	}
	var adm *feedsvc.AdminServer
	if a.feed != nil {
		adm = feedsvc.NewAdminServer(a.feed, a.faultsIfEnabled(0), a.faultsIfEnabled(1))
	}
	credential := "admin credential"
	if token == "" {
		credential = "no credential (loopback port)"
	}
	audit := auditUnary(a.log.Named("audit"), credential, adminBefore(adm))
	var opts []grpc.ServerOption
	if token != "" {
		u, s := auth.AdminToken(token, a.log.Named("admin"))
		opts = append(opts, grpc.ChainUnaryInterceptor(u, audit), grpc.ChainStreamInterceptor(s))
	} else {
		opts = append(opts, grpc.ChainUnaryInterceptor(audit))
	}
	tlsCfg, err := a.serverTLS()
	if err != nil {
		return err
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	a.adminGRPC = grpc.NewServer(append(opts, a.traceServer()...)...)
	if adm != nil {
		feedv1.RegisterFeedAdminServer(a.adminGRPC, adm)
	}
	if a.router != nil {
		if a.shardAdmin, err = a.newShardAdmin(); err != nil {
			return err
		}
		shardv1.RegisterShardAdminServer(a.adminGRPC, a.shardAdmin)
	} else {
		// Without extra stores there is nowhere to move shards to: say so, rather than let the
		// call fail as an unknown service.
		shardv1.RegisterShardAdminServer(a.adminGRPC, shardadmin.Refusing{})
	}
	healthpb.RegisterHealthServer(a.adminGRPC, a.health)
	// Reflection, as on the public port, so grpcurl reaches FeedAdmin, ShardAdmin and
	// QueueAdmin without proto files; under the same credential as every other call here.
	reflection.Register(a.adminGRPC)
	lis, err := listen(addr, "admin gRPC (FeedAdmin)", "admin-grpc-addr")
	if err != nil {
		return err
	}
	a.admGRPCLis = lis
	a.conns = append(a.conns, lis)
	return nil
}

// adminBefore reads the state a FeedAdmin Set* call is about to change (nothing without the feed
// role's adm).
func adminBefore(adm *feedsvc.AdminServer) func(ctx context.Context, method string, req any) any {
	return func(ctx context.Context, method string, req any) any {
		if adm == nil {
			return nil
		}
		var v any
		var err error
		switch m := req.(type) {
		case *feedv1.HedgePolicy:
			v, err = adm.GetHedgePolicy(ctx, &feedv1.GetHedgePolicyRequest{})
		case *feedv1.ServiceConfig:
			v, err = adm.GetServiceConfig(ctx, &feedv1.GetServiceConfigRequest{})
		case *feedv1.Faults:
			v, err = adm.GetFaults(ctx, &feedv1.GetFaultsRequest{Store: m.GetStore()})
		}
		if err != nil {
			return err.Error()
		}
		return v
	}
}

// auditUnary logs every admin call that changes something (Set*), one bounded line each:
// the method; the caller (how it authenticated, credential, and its address); the target (the
// request's fields, each value cut short); the outcome (OK or the gRPC code, with the error's
// message cut short); and the state before and after, rendered the same bounded way. A request
// of any size makes a line of a few KiB at most: the log is an audit trail, not a copy of the
// traffic.
func auditUnary(log *zap.Logger, credential string, before func(context.Context, string, any) any) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if !strings.Contains(info.FullMethod, "/Set") {
			return h(ctx, req)
		}
		was := before(ctx, info.FullMethod, req)
		resp, err := h(ctx, req)
		fields := []zap.Field{zap.String("method", quote.Message(info.FullMethod, auditField)),
			zap.String("caller", credential+" from "+peerAddr(ctx)), zap.String("target", summarize(req)),
			zap.String("outcome", status.Code(err).String())}
		if err != nil {
			fields = append(fields, zap.String("error", quote.Message(status.Convert(err).Message(), auditField)))
		} else {
			fields = append(fields, zap.String("after", summarize(resp)))
		}
		if was != nil {
			fields = append(fields, zap.String("before", summarize(was)))
		}
		log.Info("admin change", fields...)
		return resp, err
	}
}

// auditField bounds each field of an audit line.
const auditField = 1024

// summarize renders v for the audit log in at most auditField bytes: a message's set fields as
// name=value (strings quoted and cut short, bytes and lists by their size, nested messages in
// braces); anything else as fmt prints it, cut short.
func summarize(v any) string {
	if v == nil {
		return ""
	}
	m, ok := v.(proto.Message)
	if !ok {
		return quote.Message(fmt.Sprint(v), auditField)
	}
	var b strings.Builder
	summarizeMsg(&b, m.ProtoReflect(), 0)
	return quote.Message(b.String(), auditField)
}

// summarizeMsg writes m's set fields to b in declaration order, stopping once b holds more
// than auditField bytes.
func summarizeMsg(b *strings.Builder, m protoreflect.Message, depth int) {
	first := true
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if !m.Has(f) {
			continue
		}
		if b.Len() > auditField {
			return
		}
		v := m.Get(f)
		if !first {
			b.WriteByte(' ')
		}
		first = false
		b.WriteString(string(f.Name()))
		b.WriteByte('=')
		switch {
		case f.IsList():
			fmt.Fprintf(b, "[%d items]", v.List().Len())
		case f.IsMap():
			fmt.Fprintf(b, "{%d entries}", v.Map().Len())
		case f.Kind() == protoreflect.StringKind:
			b.WriteString(quote.Q(v.String()))
		case f.Kind() == protoreflect.BytesKind:
			fmt.Fprintf(b, "(%d bytes)", len(v.Bytes()))
		case f.Kind() == protoreflect.MessageKind || f.Kind() == protoreflect.GroupKind:
			if depth >= 3 {
				b.WriteString("{…}")
				break
			}
			b.WriteByte('{')
			summarizeMsg(b, v.Message(), depth+1)
			b.WriteByte('}')
		case f.Kind() == protoreflect.EnumKind:
			if ev := f.Enum().Values().ByNumber(v.Enum()); ev != nil {
				b.WriteString(string(ev.Name()))
			} else {
				fmt.Fprint(b, v.Enum())
			}
		default:
			fmt.Fprint(b, v.Interface())
		}
	}
}

// peerAddr is the caller's address, for the audit log.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// fileToken sends the bearer token kept in a file with every call, re-reading the file when it
// changes (tokens are short-lived; whoever issues them rewrites the file). The file is looked at
// at most once per tokenRecheck, not on every call: calls between use the token in hand without
// a lock or a system call.
type fileToken struct {
	path string
	now  func() time.Time // nil: time.Now
	cur  atomic.Pointer[tokenSeen]
	mu   sync.Mutex // one re-check at a time
}

// tokenSeen is the token read and when the file was last looked at.
type tokenSeen struct {
	tok     string
	mod     time.Time
	checked time.Time
}

// tokenRecheck is how often fileToken looks at its file for a new token.
const tokenRecheck = time.Second

func (f *fileToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	now := time.Now
	if f.now != nil {
		now = f.now
	}
	t := now()
	if c := f.cur.Load(); c != nil && t.Sub(c.checked) < tokenRecheck {
		return map[string]string{"authorization": "Bearer " + c.tok}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.cur.Load()
	if c != nil && t.Sub(c.checked) < tokenRecheck {
		return map[string]string{"authorization": "Bearer " + c.tok}, nil
	}
	st, err := os.Stat(f.path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	next := &tokenSeen{mod: st.ModTime(), checked: t}
	if c != nil && c.mod.Equal(next.mod) && c.tok != "" {
		next.tok = c.tok
	} else {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return nil, fmt.Errorf("token file: %w", err)
		}
		next.tok = strings.TrimSpace(string(b))
	}
	f.cur.Store(next)
	return map[string]string{"authorization": "Bearer " + next.tok}, nil
}

func (f *fileToken) RequireTransportSecurity() bool { return false }

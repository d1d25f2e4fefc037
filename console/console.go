// Package console serves SmartFeed's web console: three pages (feed, failover, queues) whose
// static assets are embedded in the binary, and whose JSON calls reach the process's own gRPC
// servers through a vanguard transcoder (the Connect protocol in the browser, gRPC behind it).
// No call is served by hand-written handlers: each goes through the gRPC server that owns the
// method, with its interceptors (authentication, the admin credential, audit) in front.
//
// Only the methods in [PublicMethods] and [AdminMethods] are reachable; everything else under
// the RPC prefix is 404, so mounting the console never widens what a gRPC port offers.
package console

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"

	"connectrpc.com/vanguard"
	"google.golang.org/grpc"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	pinlaterv1 "github.com/smartfeed/smartfeed/proto/pinlater/v1"
)

// assets are the pages, scripts and styles (embed needs a package-level variable).
//
//go:embed static
var assets embed.FS

// Prefix is where the console is mounted; RPCPrefix + "/<service>/<method>" is the JSON API.
const (
	Prefix    = "/console/"
	RPCPrefix = "/console/rpc"
)

// PublicMethods are the read-only public methods the console calls (the feed page), served by
// the public gRPC server under its own authentication.
func PublicMethods() []string {
	return []string{
		feedv1.FeedService_GetFeed_FullMethodName,
		graphv1.GraphService_GetUser_FullMethodName,
		graphv1.GraphService_GetUserByName_FullMethodName,
		graphv1.GraphService_GetObjects_FullMethodName,
		generatorv1.GeneratorService_PreviewChunk_FullMethodName,
	}
}

// AdminMethods are the FeedAdmin and QueueAdmin methods the console calls (the failover and
// queues pages), served by the admin gRPC server under the admin credential. A service the
// admin server does not register (QueueAdmin in a process without pinlater) is left out.
func AdminMethods() []string {
	return []string{
		feedv1.FeedAdmin_GetHedgePolicy_FullMethodName,
		feedv1.FeedAdmin_SetHedgePolicy_FullMethodName,
		feedv1.FeedAdmin_GetFaults_FullMethodName,
		feedv1.FeedAdmin_SetFaults_FullMethodName,
		feedv1.FeedAdmin_GetServiceConfig_FullMethodName,
		feedv1.FeedAdmin_GetReplication_FullMethodName,
		pinlaterv1.QueueAdmin_ListQueues_FullMethodName,
		pinlaterv1.QueueAdmin_ListTasks_FullMethodName,
		pinlaterv1.QueueAdmin_SetQueuePaused_FullMethodName,
		pinlaterv1.QueueAdmin_SetQueueDraining_FullMethodName,
		pinlaterv1.QueueAdmin_SetQueueRate_FullMethodName,
		pinlaterv1.QueueAdmin_SetDeadRetried_FullMethodName,
	}
}

// Options are the servers the console forwards to. A nil server leaves its methods out (404):
// the caller decides whether a port may be reached through the console (see cmd/smartfeed).
type Options struct {
	// Public serves FeedService and GraphService (the public gRPC server).
	Public *grpc.Server
	// Admin serves FeedAdmin (the admin gRPC server).
	Admin *grpc.Server
}

// New returns the console's handler, to be mounted at [Prefix] on an HTTP mux.
func New(opts Options) (http.Handler, error) {
	allowed := map[string]bool{}
	var services []*vanguard.Service
	add := func(srv *grpc.Server, methods []string) error {
		if srv == nil {
			return nil
		}
		info := srv.GetServiceInfo()
		seen := map[string]bool{}
		for _, m := range methods {
			svc, _, ok := splitMethod(m)
			if !ok {
				return fmt.Errorf("console: bad method name %q", m)
			}
			if _, ok := info[svc]; !ok {
				continue // not served by this process (another role)
			}
			allowed[m] = true
			if !seen[svc] {
				seen[svc] = true
				services = append(services, vanguard.NewService(svc, srv))
			}
		}
		return nil
	}
	if err := errors.Join(add(opts.Public, PublicMethods()), add(opts.Admin, AdminMethods())); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	if len(services) > 0 {
		tc, err := vanguard.NewTranscoder(services, vanguard.WithDefaultServiceOptions(
			vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
			vanguard.WithTargetCodecs(vanguard.CodecProto)))
		if err != nil {
			return nil, fmt.Errorf("console transcoder: %w", err)
		}
		mux.Handle(RPCPrefix+"/", http.StripPrefix(RPCPrefix, allowOnly(allowed, tc)))
	}
	sub, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, fmt.Errorf("console assets: %w", err)
	}
	mux.Handle(Prefix, http.StripPrefix(Prefix, noStore(http.FileServerFS(sub))))
	return mux, nil
}

// splitMethod splits "/pkg.Service/Method" into the service and method names.
func splitMethod(full string) (svc, method string, ok bool) {
	s, ok := strings.CutPrefix(full, "/")
	if !ok {
		return "", "", false
	}
	svc, method, ok = strings.Cut(s, "/")
	return svc, method, ok && svc != "" && method != "" && !strings.Contains(method, "/")
}

// allowOnly passes the POSTs to the methods in allowed to h; anything else is 404 (unknown
// method) or 405.
func allowOnly(allowed map[string]bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed[r.URL.Path] {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// noStore keeps browsers from caching the assets across binary versions, and the pages from
// being framed by another origin.
func noStore(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'")
		h.ServeHTTP(w, r)
	})
}

package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/smartfeed/smartfeed/internal/config"
	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// TestNoErrorEchoesUnboundedInput calls every unary method of every service the `all` role
// serves (found by reflection over the server, so a new method cannot be forgotten) with every
// top-level string field set to 1 MB: no error may quote it (status messages stay under 1.1 KB),
// and none may be Unknown or Internal.
func TestNoErrorEchoesUnboundedInput(t *testing.T) {
	a, conn := startAll(t)
	adminConn, err := grpc.NewClient(a.adminGRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer adminConn.Close()
	big := strings.Repeat("7", 1<<20)
	calls := 0
	type server struct {
		info map[string]grpc.ServiceInfo
		conn *grpc.ClientConn
	}
	for _, s := range []server{{a.grpc.GetServiceInfo(), conn}, {a.adminGRPC.GetServiceInfo(), adminConn}} {
		for svc, info := range s.info {
			if strings.HasPrefix(svc, "grpc.") {
				continue // health, reflection
			}
			d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
			if err != nil {
				t.Fatalf("%s: %v", svc, err)
			}
			sd := d.(protoreflect.ServiceDescriptor)
			for _, m := range info.Methods {
				if m.IsClientStream || m.IsServerStream {
					continue
				}
				md := sd.Methods().ByName(protoreflect.Name(m.Name))
				in := dynamicpb.NewMessage(md.Input())
				fields := md.Input().Fields()
				for i := range fields.Len() {
					f := fields.Get(i)
					if f.Kind() == protoreflect.StringKind && !f.IsList() && !f.IsMap() {
						in.Set(f, protoreflect.ValueOfString(big))
					}
				}
				out := dynamicpb.NewMessage(md.Output())
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				err := s.conn.Invoke(ctx, "/"+svc+"/"+m.Name, in, out)
				cancel()
				calls++
				st := status.Convert(err)
				if n := len(st.Message()); n > 1100 {
					t.Errorf("%s/%s: status message of %d bytes (code %v)", svc, m.Name, n, st.Code())
				}
				if st.Code() == codes.Unknown || st.Code() == codes.Internal {
					t.Errorf("%s/%s: code %v: %.200s", svc, m.Name, st.Code(), st.Message())
				}
			}
		}
	}
	if calls < 20 {
		t.Errorf("only %d methods called: reflection found too few", calls)
	}
	t.Logf("%d methods called with 1 MB strings", calls)
}

// TestGeneratorRefusesNonUserIDs: IDs that are not users are refused input, not a store
// failure, for every GeneratorService method.
func TestGeneratorRefusesNonUserIDs(t *testing.T) {
	_, conn := startAll(t)
	c := generatorv1.NewGeneratorServiceClient(conn)
	board, _ := zen.NewID(3, zen.TypeBoard, 1)
	t1023 := uint64(1023)<<36 | 5
	for _, id := range []uint64{uint64(board), 1, t1023, 1<<64 - 1, 1 << 62, 1 << 63} {
		for name, call := range map[string]func() error{
			"GenerateChunk": func() error {
				_, err := c.GenerateChunk(t.Context(), &generatorv1.GenerateChunkRequest{User: id})
				return err
			},
			"PendingChunks": func() error {
				_, err := c.PendingChunks(t.Context(), &generatorv1.PendingChunksRequest{User: id})
				return err
			},
			"SettleChunk": func() error {
				_, err := c.SettleChunk(t.Context(), &generatorv1.SettleChunkRequest{User: id, ChunkId: "1-1"})
				return err
			},
		} {
			if code := status.Code(call()); code != codes.InvalidArgument {
				t.Errorf("%s(user %d): code %v, want InvalidArgument", name, id, code)
			}
		}
	}
}

// startAll runs the `all` role for the test and returns it with a client connection.
func startAll(t *testing.T) (*app, *grpc.ClientConn) {
	t.Helper()
	return startAllWith(t, nil)
}

// startAllWith is startAll with the test config changed by mod (nil: unchanged). With
// SMARTFEED_TEST_LOG=FILE the app logs at debug level to FILE (to look into a failure).
func startAllWith(t *testing.T, mod func(*config.Config)) (*app, *grpc.ClientConn) {
	t.Helper()
	cfg := testConfig(t)
	if mod != nil {
		mod(&cfg)
	}
	lg := zap.NewNop()
	if f := os.Getenv("SMARTFEED_TEST_LOG"); f != "" {
		zc := zap.NewDevelopmentConfig()
		zc.OutputPaths = []string{f}
		zc.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
		var err error
		if lg, err = zc.Build(); err != nil {
			t.Fatalf("SMARTFEED_TEST_LOG: %v", err)
		}
	}
	a, err := newApp(t.Context(), roleAll, cfg, lg, newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient(a.grpcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return a, conn
}

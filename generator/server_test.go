package generator

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
)

func newGRPC(t *testing.T, e *env) generatorv1.GeneratorServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	generatorv1.RegisterGeneratorServiceServer(srv, NewServer(e.gen))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return generatorv1.NewGeneratorServiceClient(conn)
}

func TestGRPC(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, backends[1].make, nil)
	es := e.fill(t, 8)
	cl := newGRPC(t, e)

	resp, err := cl.GenerateChunk(ctx, &generatorv1.GenerateChunkRequest{UserStr: strconv.FormatUint(uint64(e.user), 10), Max: 3, Debug: true})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.GetChunk()
	if len(c.GetItems()) != 3 || c.GetItems()[0].GetPin() != uint64(es[0].Pin) || c.GetItems()[0].GetPinStr() != es[0].Pin.String() ||
		c.GetItems()[0].GetSource() != generatorv1.Source_SOURCE_FOLLOWING || c.GetItems()[0].GetReason() == "" || len(c.GetDebug()) == 0 {
		t.Fatalf("chunk = %v", c)
	}
	pend, err := cl.PendingChunks(ctx, &generatorv1.PendingChunksRequest{User: uint64(e.user)})
	if err != nil || len(pend.GetChunks()) != 1 || pend.GetChunks()[0].GetId() != c.GetId() {
		t.Fatalf("PendingChunks = %v, %v", pend, err)
	}
	if pend.GetChunks()[0].GetCreatedMs() <= 0 {
		t.Errorf("pending chunk without created_ms: recovery cannot age it")
	}
	users, err := cl.InFlightUsers(ctx, &generatorv1.InFlightUsersRequest{Limit: 10})
	if err != nil || len(users.GetUsers()) != 1 || users.GetUsers()[0] != uint64(e.user) {
		t.Fatalf("InFlightUsers = %v, %v; want [%d]", users, err, e.user)
	}
	if _, err := cl.InFlightUsers(ctx, &generatorv1.InFlightUsersRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("InFlightUsers with limit 0: %v, want InvalidArgument", err)
	}
	if _, err := cl.SettleChunk(ctx, &generatorv1.SettleChunkRequest{User: uint64(e.user), ChunkId: c.GetId(), Delivered: false}); err != nil {
		t.Fatal(err)
	}
	if got := len(e.pools.all(e.user)); got != 8 {
		t.Fatalf("pool after failed delivery = %d, want 8", got)
	}
	pv, err := cl.PreviewChunk(ctx, &generatorv1.PreviewChunkRequest{UserStr: strconv.FormatUint(uint64(e.user), 10), Max: 3})
	if err != nil || len(pv.GetChunk().GetItems()) != 3 || pv.GetChunk().GetId() != "" || pv.GetWanted() != 3 ||
		len(pv.GetSources()) != 3 || pv.GetSources()[0].GetName() == "" || len(pv.GetChunk().GetDebug()) == 0 {
		t.Fatalf("PreviewChunk = %v, %v; want 3 items without an id, 3 sources, debug lines", pv, err)
	}
	if got := len(e.pools.all(e.user)); got != 8 {
		t.Fatalf("pool after a preview = %d, want 8 (a preview takes nothing)", got)
	}

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"zero user", func() error {
			_, err := cl.GenerateChunk(ctx, &generatorv1.GenerateChunkRequest{})
			return err
		}},
		{"bad user_str", func() error {
			_, err := cl.GenerateChunk(ctx, &generatorv1.GenerateChunkRequest{UserStr: "-1"})
			return err
		}},
		{"user and user_str disagree", func() error {
			_, err := cl.GenerateChunk(ctx, &generatorv1.GenerateChunkRequest{User: uint64(e.user), UserStr: strconv.FormatUint(uint64(e.user)+1, 10)})
			return err
		}},
		{"negative max", func() error {
			_, err := cl.GenerateChunk(ctx, &generatorv1.GenerateChunkRequest{User: uint64(e.user), Max: -1})
			return err
		}},
		{"max too big", func() error {
			_, err := cl.GenerateChunk(ctx, &generatorv1.GenerateChunkRequest{User: uint64(e.user), Max: 5000})
			return err
		}},
		{"malformed chunk id", func() error {
			_, err := cl.SettleChunk(ctx, &generatorv1.SettleChunkRequest{User: uint64(e.user), ChunkId: "x"})
			return err
		}},
		{"preview a board id", func() error {
			_, err := cl.PreviewChunk(ctx, &generatorv1.PreviewChunkRequest{User: uint64(boardID(t, 1))})
			return err
		}},
		{"preview max too big", func() error {
			_, err := cl.PreviewChunk(ctx, &generatorv1.PreviewChunkRequest{User: uint64(e.user), Max: 5000})
			return err
		}},
		{"pending zero user", func() error {
			_, err := cl.PendingChunks(ctx, &generatorv1.PendingChunksRequest{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code := status.Code(tc.call()); code != codes.InvalidArgument {
				t.Errorf("code = %v, want InvalidArgument", code)
			}
		})
	}
}

// TestGRPCStorageError: a storage failure is Unavailable at the edge (not InvalidArgument).
func TestGRPCStorageError(t *testing.T) {
	e := newEnv(t, backends[0].make, nil)
	e.fill(t, 3)
	e.state.Fail = errors.New("injected storage failure")
	cl := newGRPC(t, e)
	_, err := cl.GenerateChunk(context.Background(), &generatorv1.GenerateChunkRequest{User: uint64(e.user)})
	if code := status.Code(err); code != codes.Unavailable {
		t.Fatalf("code = %v (%v), want Unavailable", code, err)
	}
}

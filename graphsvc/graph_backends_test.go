package graphsvc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

func TestGraphServicePebble(t *testing.T) {
	graphRunSuite(t, func(t *testing.T) zen.Store {
		s, err := zenpebble.Open(t.TempDir(), zenpebble.WithNoSync())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestGraphServiceHBase(t *testing.T) {
	zk := testenv.HBase(t)
	graphRunSuite(t, func(t *testing.T) zen.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := zenhbase.Open(ctx, zk, zenhbase.Options{
			TablePrefix:   fmt.Sprintf("gs%d_", time.Now().UnixNano()),
			FlushInterval: 2 * time.Millisecond,
			SplitEvery:    1024, // 4 regions per table: quicker to create
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, n := range []string{zen.TableObjects, zen.TableEdges, zen.TableCounters, zen.TableModShard} {
				if err := s.Drop(ctx, n); err != nil {
					t.Logf("drop %s: %v", n, err)
				}
			}
			s.Close()
		})
		return s
	})
}

// TestGraphServiceRedisFanoutIDs runs the service on a real pinlater.Client: a pin's fanout and
// the fanout of its repin onto another board are two tasks (the repin is not swallowed as a
// duplicate of the pin's own fanout), and a replayed CreatePin enqueues nothing new.
func TestGraphServiceRedisFanoutIDs(t *testing.T) {
	addr := testenv.Redis(t)
	ns := fmt.Sprintf("graphsvc_test_%d", time.Now().UnixNano())
	c, err := pinlater.NewClient(pinlater.RedisAddr(addr), zaptest.NewLogger(t), nil, pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pinlater.NewAdmin(pinlater.RedisAddr(addr), pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Purge(context.Background())
		admin.Close()
		c.Close()
	})
	cl, _ := graphServe(t, zenmem.New(), c)
	ctx := context.Background()
	mkUser := func(n string) *graphv1.User {
		return graphOK(cl.CreateUser(ctx, &graphv1.CreateUserRequest{Username: n, Email: n + "@example.com"}))(t)
	}
	a, b := mkUser("alice"), mkUser("bob")
	ab := graphOK(cl.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: a.Id, Name: "a"}))(t)
	bb := graphOK(cl.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: b.Id, Name: "b"}))(t)
	req := &graphv1.CreatePinRequest{AuthorId: a.Id, BoardId: ab.Id, ImageUrl: "https://i.example.com/1.jpg", RequestId: "r1"}
	p := graphOK(cl.CreatePin(ctx, req))(t)
	graphOK(cl.CreatePin(ctx, req))(t)
	graphOK(cl.SavePin(ctx, &graphv1.SavePinRequest{UserId: b.Id, PinId: p.Id, BoardId: bb.Id}))(t)
	graphOK(cl.Follow(ctx, &graphv1.FollowRequest{UserId: b.Id, TargetId: a.Id}))(t)
	q, err := admin.Queue(ctx, pinlater.QueueFanout)
	if err != nil {
		t.Fatal(err)
	}
	if q.Pending != 2 {
		t.Errorf("fanout queue holds %d pending tasks, want 2 (the pin's, the repin's)", q.Pending)
	}
	d, err := admin.Queue(ctx, pinlater.QueueDefault)
	if err != nil {
		t.Fatal(err)
	}
	if d.Pending != 1 {
		t.Errorf("default queue holds %d pending tasks, want 1 (follow-backfill)", d.Pending)
	}
}

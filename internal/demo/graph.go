package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/smartfeed/smartfeed/zen"
)

// Graph is the synthetic graph of the demo, kept in graph.json beside the data so the next
// run reuses it.
type Graph struct {
	Users     []zen.ID   `json:"users"`
	Boards    [][]zen.ID `json:"boards"` // per user, same index as Users
	Interests []zen.ID   `json:"interests"`
	// Showcase is the user with the most followees: the one the grpcurl line asks about.
	Showcase zen.ID `json:"showcase"`
	// Follows counts the follow edges written.
	Follows int `json:"follows"`
}

// GraphSpec sizes the synthetic graph.
type GraphSpec struct {
	Users, BoardsPerUser, Interests, FollowsPerUser int
	Seed                                            uint64
}

// GraphFile is the file in the data directory that keeps the graph for the next run.
const GraphFile = "graph.json"

// LoadGraph reads graph.json from dir; ok is false when there is none.
func LoadGraph(dir string) (Graph, bool, error) {
	var g Graph
	b, err := os.ReadFile(filepath.Join(dir, GraphFile))
	if errors.Is(err, fs.ErrNotExist) {
		return g, false, nil
	}
	if err != nil {
		return g, false, fmt.Errorf("read demo graph: %w", err)
	}
	if err := json.Unmarshal(b, &g); err != nil {
		return g, false, fmt.Errorf("parse demo graph %s: %w", filepath.Join(dir, GraphFile), err)
	}
	if len(g.Users) == 0 || len(g.Boards) != len(g.Users) || g.Showcase == 0 {
		return g, false, fmt.Errorf("demo graph %s is incomplete; delete it to rebuild", filepath.Join(dir, GraphFile))
	}
	return g, true, nil
}

// Save writes g to GraphFile in dir.
func (g Graph) Save(dir string) error {
	b, err := json.MarshalIndent(g, "", " ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, GraphFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write demo graph: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, GraphFile))
}

// GraphWriter is the part of *zen.Graph the demo writes through.
type GraphWriter interface {
	Create(ctx context.Context, t zen.Type, near zen.ID, data map[string]any) (zen.Object, error)
	AddEdge(ctx context.Context, e zen.Edge) error
	AddInverse(ctx context.Context, e zen.Edge) error
}

// AddBoth writes an edge and, when its type has one, its inverse.
func AddBoth(ctx context.Context, g GraphWriter, e zen.Edge) error {
	if err := g.AddEdge(ctx, e); err != nil {
		return err
	}
	if _, ok := e.Type.Inverse(); ok {
		return g.AddInverse(ctx, e)
	}
	return nil
}

// buildWriters is how many goroutines write the graph: each write waits for a synced commit
// (Pebble) or a round trip to a region server (HBase), so one writer leaves the store idle; on
// an HBase cluster one writer took minutes to write the demo's 500-user graph.
const buildWriters = 16

// createUsers creates the users of out.Users ("demo<i>"), each with boardsPerUser boards
// (out.Boards), calling step after each object. Users are created on buildWriters goroutines;
// user i is out.Users[i] whatever the order.
func createUsers(ctx context.Context, g GraphWriter, boardsPerUser int, out *Graph, step func()) error {
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(buildWriters)
	for i := range out.Users {
		eg.Go(func() error { return createUser(ctx, g, i, boardsPerUser, out, step) })
	}
	return eg.Wait()
}

// createUser creates user i of out and its boards.
func createUser(ctx context.Context, g GraphWriter, i, boardsPerUser int, out *Graph, step func()) error {
	u, err := g.Create(ctx, zen.TypeUser, 0, map[string]any{"username": fmt.Sprintf("demo%d", i)})
	if err != nil {
		return fmt.Errorf("create user: %w", err)
	}
	out.Users[i] = u.ID
	step()
	boards := make([]zen.ID, 0, boardsPerUser)
	for j := range boardsPerUser {
		b, err := g.Create(ctx, zen.TypeBoard, u.ID, map[string]any{"name": fmt.Sprintf("board %d of demo%d", j, i), "owner": u.ID.String()})
		if err != nil {
			return fmt.Errorf("create board: %w", err)
		}
		if err := AddBoth(ctx, g, zen.Edge{From: u.ID, Type: zen.EdgeUserBoards, To: b.ID}); err != nil {
			return fmt.Errorf("user boards: %w", err)
		}
		boards = append(boards, b.ID)
		step()
	}
	out.Boards[i] = boards
	return nil
}

// BuildGraph creates users, boards and interests, then follows: each user follows
// FollowsPerUser users drawn from a Zipf law over the users (so followers are power-law
// distributed: a few users have very many), one board of a followed user and two interests.
// progress is called with (done, total) steps.
func BuildGraph(ctx context.Context, g GraphWriter, spec GraphSpec, progress func(done, total int)) (Graph, error) {
	r := rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15))
	n := spec.Users
	out := Graph{Users: make([]zen.ID, n), Boards: make([][]zen.ID, n), Interests: make([]zen.ID, spec.Interests)}
	total := n*(1+spec.BoardsPerUser) + spec.Interests + n
	var mu sync.Mutex
	done := 0
	step := func() { // called from the writers
		mu.Lock()
		defer mu.Unlock()
		done++
		if done%50 == 0 || done == total {
			progress(done, total)
		}
	}
	for i := range spec.Interests {
		o, err := g.Create(ctx, zen.TypeInterest, 0, map[string]any{"name": fmt.Sprintf("interest-%d", i)})
		if err != nil {
			return out, fmt.Errorf("create interest: %w", err)
		}
		out.Interests[i] = o.ID
		step()
	}
	if err := createUsers(ctx, g, spec.BoardsPerUser, &out, step); err != nil {
		return out, err
	}
	// The follows are drawn in order (the same graph for a seed) and written by buildWriters
	// goroutines, one user's edges at a time.
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(buildWriters)
	zipf := rand.NewZipf(r, 1.2, 1, uint64(n-1))
	best, bestCount := 0, -1
	for i := range n {
		edges, nUsers := drawFollows(r, zipf, spec, &out, i)
		out.Follows += len(edges)
		eg.Go(func() error {
			for _, e := range edges {
				if err := AddBoth(ectx, g, e); err != nil {
					return fmt.Errorf("follow: %w", err)
				}
			}
			step()
			return nil
		})
		if nUsers > bestCount {
			best, bestCount = i, nUsers
		}
	}
	if err := eg.Wait(); err != nil {
		return out, err
	}
	out.Showcase = out.Users[best]
	return out, nil
}

// drawFollows draws user i's follows: users from the Zipf law, one board of a followed user
// and up to two interests. nUsers is how many users i follows.
func drawFollows(r *rand.Rand, zipf *rand.Zipf, spec GraphSpec, out *Graph, i int) (edges []zen.Edge, nUsers int) {
	n := len(out.Users)
	follows := map[int]bool{}
	want := min(spec.FollowsPerUser/2+r.IntN(spec.FollowsPerUser+1), n-1)
	for tries := 0; len(follows) < want && tries < want*10; tries++ {
		// Rank k of the Zipf law maps to a fixed user, so low ranks gather the followers.
		j := int(zipf.Uint64())
		if j == i || follows[j] {
			continue
		}
		follows[j] = true
		edges = append(edges, zen.Edge{From: out.Users[i], Type: zen.EdgeFollowsUser, To: out.Users[j]})
	}
	if len(follows) > 0 && spec.BoardsPerUser > 0 {
		for j := range follows {
			b := out.Boards[j][r.IntN(len(out.Boards[j]))]
			edges = append(edges, zen.Edge{From: out.Users[i], Type: zen.EdgeFollowsBoard, To: b})
			break
		}
	}
	for range min(2, spec.Interests) {
		in := out.Interests[r.IntN(spec.Interests)]
		edges = append(edges, zen.Edge{From: out.Users[i], Type: zen.EdgeFollowsInterest, To: in})
	}
	return edges, len(follows)
}

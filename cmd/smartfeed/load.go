package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/bench"
	"github.com/smartfeed/smartfeed/graphsvc"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// loadFlags are the flags of "smartfeed load".
type loadFlags struct {
	file         string
	model        string
	users        int
	seed         uint64
	maxFollowers int
	batch        int
	chunk        int
	every        time.Duration
	// bulkLoad is the command that loads staged rows into HBase as HFiles (empty: the store's
	// batched writes); ingest has Pebble ingest them as sstables; bulkDir is where they are
	// staged.
	bulkLoad, bulkDir string
	ingest            bool
}

// newLoadCmd is "smartfeed load": the bulk loader (graphsvc.Loader) over the configured main
// store, from a JSON Lines file or the benchmark's social model.
func newLoadCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "load",
		Short: "bulk-load users, boards and follows (a JSON Lines file, or the benchmark's social model) into the graph",
		Long: `Writes users, boards and follows with the rows the graph API writes (objects, username and email
keys, edges and their inverses, counts) in large batched writes. Input: --file (JSON Lines, "-" for
stdin; see docs/operations.md, "Loading an existing social graph") or --model stream (--users,
--seed: Stream-Framework-Bench's social model, the one smartfeed bench uses; user i is "u<i>").
Idempotent: rerun after a failure to finish a load; users are found again by username, boards by key.
Run it with the servers stopped on the embedded store (one process at a time) and with the join cache
empty (cached graph rows are not invalidated). Takes the same storage flags as the servers.`,
		Args: cobra.NoArgs,
	}
	var lf loadFlags
	fs := cmd.Flags()
	fs.StringVar(&lf.file, "file", "", "JSON Lines input (\"-\": stdin)")
	fs.StringVar(&lf.model, "model", "", "generate the input instead: \"stream\" (the benchmark's social model)")
	fs.IntVar(&lf.users, "users", 100000, "with --model: users of the network")
	fs.Uint64Var(&lf.seed, "seed", 8, "with --model: the model's seed")
	fs.IntVar(&lf.maxFollowers, "max-followers", 0, "with --model: cap every bucket's followers per user (0: the model's counts)")
	fs.IntVar(&lf.batch, "batch", 0, "rows per store write (0: 50,000 on Pebble, 5,000 on HBase)")
	fs.IntVar(&lf.chunk, "chunk", 10000, "users or boards checked and given IDs together")
	fs.DurationVar(&lf.every, "progress", 5*time.Second, "how often to print progress on stderr")
	fs.StringVar(&lf.bulkLoad, "hbase-bulk-load", "", "with --storage hbase: load the rows as HFiles with this command (scripts/hbase-bulkload.sh: HBase's own bulk load), "+
		"staged sorted under --bulk-dir first, instead of writing them through the region servers (empty: batched writes)")
	fs.BoolVar(&lf.ingest, "pebble-ingest", true, "with --storage pebble: write the rows as sstables, staged sorted under --bulk-dir first, and have Pebble ingest them "+
		"(no write-ahead log, no memtable, nothing left to compact); false: batched writes")
	fs.StringVar(&lf.bulkDir, "bulk-dir", "", "with --hbase-bulk-load or --pebble-ingest: where the rows are staged (about their size on disk; empty: the data directory on Pebble, the system's temporary directory on HBase)")
	for _, n := range []string{"file", "model", "users", "seed", "max-followers", "batch", "chunk", "progress", "hbase-bulk-load", "pebble-ingest", "bulk-dir"} {
		noEnv(fs, n)
	}
	// The loader opens the main store alone: the feed stores' quorums are not asked for.
	resolve := configFlagsFor(fs, config.DefaultConfig(), getenv, func(config.Config) config.Uses { return config.Uses{Main: true} })
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := resolve(cmd)
		if err != nil {
			return err
		}
		src, closeSrc, err := lf.source()
		if err != nil {
			return err
		}
		defer closeSrc()
		st, err := runLoad(cmd.Context(), cfg, src, lf, nil, cmd.ErrOrStderr())
		fmt.Fprintf(cmd.OutOrStdout(), "load: %s\n", st)
		for _, r := range st.Reasons {
			fmt.Fprintf(cmd.OutOrStdout(), "load: refused: %s\n", r)
		}
		return err
	}
	return cmd
}

// source opens the input the flags name.
func (lf loadFlags) source() (graphsvc.LoadSource, func(), error) {
	switch {
	case lf.file != "" && lf.model != "":
		return nil, nil, errors.New("load: --file and --model exclude each other")
	case lf.file == "-":
		return graphsvc.NewJSONLSource(os.Stdin), func() {}, nil
	case lf.file != "":
		f, err := os.Open(lf.file)
		if err != nil {
			return nil, nil, fmt.Errorf("load: %w", err)
		}
		return graphsvc.NewJSONLSource(f), func() { f.Close() }, nil
	case lf.model == "stream":
		if lf.users < 2 {
			return nil, nil, fmt.Errorf("load: --users %d: at least 2", lf.users)
		}
		return newModelSource(bench.NewModelSpec(lf.users, lf.seed, lf.maxFollowers)), func() {}, nil
	case lf.model != "":
		return nil, nil, fmt.Errorf("load: --model %q: the only model is \"stream\"", lf.model)
	}
	return nil, nil, errors.New("load: give --file or --model stream")
}

// runLoad loads src into the main store of cfg; ids, when not nil, gets every user's ID.
func runLoad(ctx context.Context, cfg config.Config, src graphsvc.LoadSource, lf loadFlags, ids func(kind, key string, id zen.ID), stderr io.Writer) (graphsvc.LoadStats, error) {
	if cfg.Storage.Stores != "" || cfg.Storage.ShardMap.File != "" || cfg.Storage.ShardMap.ZK != "" {
		return graphsvc.LoadStats{}, errors.New("load: writes to the main store over the default shard map; " +
			"--stores and a shard map are not supported")
	}
	st := newStores(cfg.Storage, zap.NewNop(), nil)
	defer func() { _ = st.close() }()
	main, err := st.get(ctx, storeMain)
	if err != nil {
		return graphsvc.LoadStats{}, fmt.Errorf("load: %w (with the embedded store, stop the servers first)", err)
	}
	g, err := zen.NewGraph(ctx, main, nil, nil)
	if err != nil {
		return graphsvc.LoadStats{}, fmt.Errorf("load: %w", err)
	}
	batch := lf.batch
	if cfg.Storage.Backend == config.BackendHBase {
		if batch == 0 && lf.bulkLoad == "" {
			batch = hbaseLoadBatch
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, hbaseLoadBound)
		defer cancel()
	}
	if batch == 0 {
		batch = 50000
	}
	opts := []graphsvc.LoaderOption{graphsvc.WithLoadBatch(batch), graphsvc.WithLoadChunk(lf.chunk),
		graphsvc.WithLoadProgress(lf.every, func(s graphsvc.LoadStats) { fmt.Fprintf(stderr, "load: %s\n", s) })}
	if ids != nil {
		opts = append(opts, graphsvc.WithLoadIDs(ids))
	}
	stage, err := newLoadStage(main, cfg, lf.bulkLoad, lf.ingest, lf.bulkDir, stderr)
	if err != nil {
		return graphsvc.LoadStats{}, err
	}
	if stage == nil {
		return graphsvc.NewLoader(g, nil, opts...).Load(ctx, src)
	}
	defer stage.Close()
	ls, err := graphsvc.NewLoader(g, nil, append(opts, graphsvc.WithLoadSink(stage))...).Load(ctx, src)
	if err == nil {
		fmt.Fprintf(stderr, "load: %s\n", stage.Summary())
	}
	return ls, err
}

// loadStage is a bulk load's way into the main store other than its writes: HBase's own bulk
// load, or Pebble's ingestion of sstables.
type loadStage interface {
	zen.BulkSink
	Close() error
	// Summary says what the stage did; Files is how many HFiles or sstables it loaded.
	Summary() string
	Files() int
}

// hbaseLoadStage is HBase's own bulk load.
type hbaseLoadStage struct{ st *zenhbase.Stage }

func (h hbaseLoadStage) Stage(ctx context.Context, table string, muts []zen.Mutation) error {
	return h.st.Stage(ctx, table, muts)
}
func (h hbaseLoadStage) Commit(ctx context.Context) error { return h.st.Commit(ctx) }
func (h hbaseLoadStage) Close() error                     { return h.st.Close() }
func (h hbaseLoadStage) Files() int                       { return h.st.Stats().HFiles }
func (h hbaseLoadStage) Summary() string {
	st := h.st.Stats()
	return fmt.Sprintf("HBase bulk load: %d rows of %d tables in %d HFiles (%d MiB), written in %.1f s, moved into the tables in %.1f s",
		st.Rows, st.Tables, st.HFiles, st.Bytes>>20, st.WriteS, st.LoadS)
}

// pebbleLoadStage is Pebble's ingestion.
type pebbleLoadStage struct{ st *zenpebble.Stage }

func (p pebbleLoadStage) Stage(ctx context.Context, table string, muts []zen.Mutation) error {
	return p.st.Stage(ctx, table, muts)
}
func (p pebbleLoadStage) Commit(ctx context.Context) error { return p.st.Commit(ctx) }
func (p pebbleLoadStage) Close() error                     { return p.st.Close() }
func (p pebbleLoadStage) Files() int                       { return p.st.Stats().Files }
func (p pebbleLoadStage) Summary() string {
	st := p.st.Stats()
	return fmt.Sprintf("Pebble ingestion: %d rows of %d tables in %d sstables (%d MiB, %d MiB of them into L0), written in %.1f s, ingested in %.1f s",
		st.Rows, st.Tables, st.Files, st.Bytes>>20, st.L0Bytes>>20, st.WriteS, st.IngestS)
}

// newLoadStage returns the stage of a load into the main store st: HBase's bulk load when
// command names its command (HBase only), Pebble's ingestion when ingest is set and the store
// is Pebble; nil when neither applies (the store's batched writes). Its files go under dir;
// empty, under the data directory on Pebble (the stores' file system, where the sstables are
// linked in, not copied, and not a /tmp kept in memory), the system's temporary directory on
// HBase.
func newLoadStage(st zen.Store, cfg config.Config, command string, ingest bool, dir string, stderr io.Writer) (loadStage, error) {
	switch {
	case command != "":
		hb, ok := st.(*zenhbase.Store)
		if cfg.Storage.Backend != config.BackendHBase || !ok {
			return nil, fmt.Errorf("load: --hbase-bulk-load needs --storage hbase (storage is %s)", cfg.Storage.Backend)
		}
		stage, err := hb.NewStage(dir, zenhbase.CommandLoad(stderr, command), 0)
		if err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		return hbaseLoadStage{stage}, nil
	case ingest && cfg.Storage.Backend == config.BackendPebble:
		pb, ok := st.(*zenpebble.Store)
		if !ok {
			return nil, nil
		}
		if dir == "" {
			dir = cfg.Storage.DataDir
		}
		stage, err := pb.NewStage(dir, 0)
		if err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		return pebbleLoadStage{stage}, nil
	}
	return nil, nil
}

// modelSource streams a bench.Model as load records: user i is "u<i>" (email u<i>@bench.example);
// then, when boards is set, a board of key "u<i>-pins" for each user; then each user's
// followers, one follow record each.
type modelSource struct {
	m      *bench.Model
	boards bool
	u      int   // next user record
	b      int   // next board record
	target int   // next user whose followers are streamed
	fol    []int // the followers of user target-1 not yet streamed
}

func newModelSource(m *bench.Model) *modelSource { return &modelSource{m: m} }

// modelUsername is the username of the model's user i.
func modelUsername(i int) string { return "u" + strconv.Itoa(i) }

// Next returns the next record, or io.EOF.
func (s *modelSource) Next() (graphsvc.LoadRecord, error) {
	if s.u < s.m.Users {
		name := modelUsername(s.u)
		s.u++
		return graphsvc.LoadRecord{User: &graphsvc.LoadUser{Username: name, Email: name + "@bench.example"}}, nil
	}
	if s.boards && s.b < s.m.Users {
		name := modelUsername(s.b)
		s.b++
		return graphsvc.LoadRecord{Board: &graphsvc.LoadBoard{Key: name + "-pins", Owner: name, Name: "pins"}}, nil
	}
	for len(s.fol) == 0 {
		if s.target >= s.m.Users {
			return graphsvc.LoadRecord{}, io.EOF
		}
		s.fol = s.m.FollowersOf(s.target)
		s.target++
	}
	f := s.fol[0]
	s.fol = s.fol[1:]
	return graphsvc.LoadRecord{Follow: &graphsvc.LoadFollow{User: modelUsername(f), Target: modelUsername(s.target - 1)}}, nil
}

// On HBase a bulk load (smartfeed load's, the bench's) writes hbaseLoadBatch rows a store write, and its calls are
// bounded by hbaseLoadBound as a whole instead of the store's per-call timeout (5 s, for a
// context without a deadline): on a busy machine a standalone region server, still opening the
// regions of the tables just created, can take longer than that for one write of thousands of
// rows. A load is a batch job: it waits for the store.
const (
	hbaseLoadBatch = 5000
	hbaseLoadBound = 2 * time.Hour
)

// LoadModel writes the model's users, a "pins" board each, and its follows with the bulk
// loader (bench.ModelLoader), and returns the users' IDs by model index.
func (s *benchSystem) LoadModel(ctx context.Context, m *bench.Model, progress bench.Progress) ([]uint64, *bench.LoadReport, error) {
	ids := make([]uint64, m.Users)
	var bad error
	src := newModelSource(m)
	src.boards = true
	total := m.Edges()
	var batch []graphsvc.LoaderOption
	if s.a.cfg.Storage.Backend == config.BackendHBase {
		if s.bulkLoad == "" {
			batch = append(batch, graphsvc.WithLoadBatch(hbaseLoadBatch))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, hbaseLoadBound)
		defer cancel()
	}
	main, err := s.a.stores.get(ctx, storeMain)
	if err != nil {
		return nil, nil, err
	}
	stage, err := newLoadStage(main, s.a.cfg, s.bulkLoad, s.ingest, "", s.logw)
	if err != nil {
		return nil, nil, err
	}
	if stage != nil {
		defer stage.Close()
		batch = append(batch, graphsvc.WithLoadSink(stage))
	}
	l := graphsvc.NewLoader(s.a.graph, nil, append(batch,
		graphsvc.WithLoadIDs(func(kind, key string, id zen.ID) {
			name, _ := strings.CutSuffix(key, "-pins")
			i, err := strconv.Atoi(strings.TrimPrefix(name, "u"))
			if err != nil || i < 0 || i >= len(ids) {
				bad = fmt.Errorf("load: %s %q is not the model's", kind, key)
				return
			}
			if kind == "user" {
				ids[i] = uint64(id)
				return
			}
			s.mu.Lock()
			s.boards[ids[i]] = id
			s.mu.Unlock()
		}),
		graphsvc.WithLoadProgress(2*time.Second, func(st graphsvc.LoadStats) {
			if progress != nil {
				progress("graph", int(st.Follows), total)
			}
		}))...)
	st, err := l.Load(ctx, src)
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, nil, err
	}
	if progress != nil {
		progress("graph", total, total)
	}
	if st.UsersRefused+st.BoardsRefused+st.FollowsRefused+st.Malformed > 0 {
		return nil, nil, fmt.Errorf("load: the model's records were refused: %s", st)
	}
	rep := &bench.LoadReport{Users: st.Users + st.UsersExisting, Follows: st.Follows + st.FollowsExisting,
		Rows: st.Rows, Seconds: st.Elapsed.Seconds(), RowsPerSec: st.RowsPerSecond()}
	switch stage.(type) {
	case hbaseLoadStage:
		rep.HFiles = stage.Files()
	case pebbleLoadStage:
		rep.SSTables = stage.Files()
	}
	return ids, rep, nil
}

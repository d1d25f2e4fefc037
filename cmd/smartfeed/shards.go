package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/quote"
	shardv1 "github.com/smartfeed/smartfeed/proto/shard/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/shardwatch"
)

const shardsLong = `check FILE validates a shard map file and prints it; publish FILE validates it and pushes it
to the ZooKeeper znode that every running process watches (--shard-map-zk, --shard-map-zk-path).
move --shards A-B --to STORE asks the process holding the shards' store (its admin gRPC port,
--admin-grpc-addr, with --admin-token-file) to move them to another store of its --stores while
it serves: copy, catch-up passes, a brief write fence on those shards only, a final pass,
verification per shard, and the switch of the shard map. --dry-run reports what would move.

A shard map is JSON: {"ranges": [{"from": 0, "to": 2047, "store": "default", "open": false},
{"from": 2048, "to": 4095, "store": "default", "open": true}]}. New objects go to open shards
only. Ranges must not overlap or leave gaps, and name a store the processes know.
Flags (each with its SMARTFEED_* twin) may come before or after FILE.`

// newShardsCmd is "smartfeed shards check|publish FILE": it validates shard maps and pushes
// them to ZooKeeper.
func newShardsCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "check a shard map file, publish it to the ZooKeeper znode running processes watch, or move shards between stores",
		Long:  shardsLong,
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	resolve := configFlags(cmd.PersistentFlags(), config.DefaultConfig(), getenv)
	for _, verb := range []string{"check", "publish"} {
		short := "validate a shard map file and print it"
		if verb == "publish" {
			short = "validate a shard map file and push it to the ZooKeeper znode every running process watches"
		}
		cmd.AddCommand(&cobra.Command{
			Use:   verb + " FILE",
			Short: short,
			Args: func(_ *cobra.Command, args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("shards %s: want one FILE (see smartfeed shards --help)", verb)
				}
				return nil
			},
			RunE: func(cmd *cobra.Command, args []string) error {
				cfg, err := resolve(cmd)
				if err != nil {
					return err
				}
				return shards(cmd.Context(), cfg, verb, args[0], cmd.OutOrStdout())
			},
		})
	}
	cmd.AddCommand(newShardsMoveCmd(resolve))
	return cmd
}

// newShardsMoveCmd is "smartfeed shards move --shards A-B --to STORE [--dry-run]".
func newShardsMoveCmd(resolve func(*cobra.Command) (config.Config, error)) *cobra.Command {
	var (
		rng, to  string
		dry      bool
		maxFence time.Duration
	)
	c := &cobra.Command{
		Use:   "move --shards A-B --to STORE",
		Short: "move a shard range to another store while the process holding it serves (through its admin gRPC port)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			from, upto, err := parseShardRange(rng)
			if err != nil {
				return err
			}
			if to == "" {
				return errors.New("shards move: --to STORE is required (a store of the process's --stores, or default)")
			}
			limit := maxFence.Milliseconds()
			if maxFence < 0 {
				limit = -1
			}
			return shardsMove(cmd.Context(), cfg.Admin, &shardv1.MoveShardsRequest{From: uint32(from), To: uint32(upto),
				Target: to, DryRun: dry, MaxFenceMillis: limit}, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&rng, "shards", "", "the shards to move: A-B (inclusive) or one shard A")
	c.Flags().StringVar(&to, "to", "", "name of the target store")
	c.Flags().BoolVar(&dry, "dry-run", false, "report rows and bytes per shard and what would be done, changing nothing")
	c.Flags().DurationVar(&maxFence, "max-fence", 0, "refuse to fence when a catch-up pass takes longer (0: the server's 4s; negative: no limit)")
	noEnv(c.Flags(), "dry-run")
	noEnv(c.Flags(), "shards")
	noEnv(c.Flags(), "to")
	return c
}

// parseShardRange parses "A-B" (A ≤ B ≤ 65535) or "A".
func parseShardRange(s string) (from, to uint16, err error) {
	bad := func(why string) (uint16, uint16, error) {
		return 0, 0, fmt.Errorf("--shards %s: %s (want A-B, two shard numbers 0–%d, A ≤ B)", quote.Q(s), why, zen.MaxShard)
	}
	if s == "" {
		return bad("empty")
	}
	a, b, isRange := strings.Cut(s, "-")
	if !isRange {
		b = a
	}
	x, err1 := strconv.ParseUint(a, 10, 16)
	y, err2 := strconv.ParseUint(b, 10, 16)
	if err1 != nil || err2 != nil {
		return bad("not shard numbers")
	}
	if x > y {
		return bad("first above last")
	}
	return uint16(x), uint16(y), nil
}

// shardsMove calls ShardAdmin.MoveShards and shows its progress (a bar on a terminal, a line a
// second otherwise) and its result.
func shardsMove(ctx context.Context, adm config.Admin, req *shardv1.MoveShardsRequest, stdout io.Writer) error {
	if adm.GRPCAddr == "" {
		return errors.New("shards move: no admin gRPC address (--admin-grpc-addr)")
	}
	dial := adminDial{tokenFile: adm.TokenFile, caFile: adm.CAFile, serverName: adm.ServerName}
	conn, err := dial.grpc(adm.GRPCAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := shardv1.NewShardAdminClient(conn).MoveShards(ctx, req)
	if err != nil {
		return fmt.Errorf("shards move via %s: %s", adm.GRPCAddr, status.Convert(dial.explain(err)).Message())
	}
	tty := isTerminal(stdout)
	var last time.Time
	for {
		ev, err := stream.Recv()
		if err != nil {
			if tty {
				fmt.Fprintln(stdout)
			}
			if status.Code(err) == codes.Unimplemented {
				return fmt.Errorf("shards move %d–%d to %s via %s: %s: the process there moves no shards: start it with --stores "+
					"(and --shard-map-file or --shard-map-zk)", req.From, req.To, req.Target, adm.GRPCAddr, codes.FailedPrecondition)
			}
			return fmt.Errorf("shards move %d–%d to %s via %s: %s: %s", req.From, req.To, req.Target, adm.GRPCAddr,
				status.Code(err), status.Convert(err).Message())
		}
		if p := ev.GetProgress(); p != nil {
			line := progressLine(p)
			switch {
			case tty:
				fmt.Fprintf(stdout, "\r\033[K%s", line)
			case time.Since(last) >= time.Second || p.GetPhase() != "pass":
				fmt.Fprintln(stdout, line)
				last = time.Now()
			}
			continue
		}
		if tty {
			fmt.Fprintln(stdout)
		}
		printMoveResult(stdout, req, ev.GetResult())
		return nil
	}
}

func progressLine(p *shardv1.MoveProgress) string {
	switch p.GetPhase() {
	case "pass", "final":
		name := fmt.Sprintf("pass %d", p.GetPass())
		if p.GetPhase() == "final" {
			name = "final pass (fenced)"
		}
		return fmt.Sprintf("%s %s %d/%d rows, %d changed (%s)", name, bar(int64(p.GetDone()), int64(p.GetTotal()), 30),
			p.GetDone(), p.GetTotal(), p.GetChanged(), p.GetTable())
	}
	return p.GetPhase()
}

func printMoveResult(w io.Writer, req *shardv1.MoveShardsRequest, r *shardv1.MoveResult) {
	var rows, bytes int64
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tROWS\tBYTES")
	for _, s := range r.GetShards() {
		fmt.Fprintf(tw, "%d\t%d\t%d\n", s.GetShard(), s.GetRows(), s.GetBytes())
		rows += s.GetRows()
		bytes += s.GetBytes()
	}
	_ = tw.Flush()
	switch {
	case r.GetAlreadyDone():
		fmt.Fprintf(w, "shards %d–%d are already on %s: nothing to do\n", req.From, req.To, req.Target)
	case r.GetDryRun():
		fmt.Fprintf(w, "dry run: would copy %d rows (%d bytes) of shards %d–%d from %s to %s (%d rows of the range already there), "+
			"then catch up, fence writes to those shards, run a final pass, verify and switch; nothing changed\n",
			rows, bytes, req.From, req.To, r.GetSource(), req.Target, r.GetTargetRows())
	default:
		resumed := ""
		if r.GetResumed() {
			resumed = " (resumed an unfinished move)"
		}
		fmt.Fprintf(w, "moved shards %d–%d from %s to %s%s: %d rows (%d bytes) verified; %d passes, %d rows copied, %d deleted, "+
			"%d in the final pass; writes to these shards fenced for %v; took %v\n",
			req.From, req.To, r.GetSource(), req.Target, resumed, rows, bytes, r.GetPasses(), r.GetRowsCopied(), r.GetRowsDeleted(),
			r.GetFinalRows(), time.Duration(r.GetFenceNanos()).Round(time.Millisecond), time.Duration(r.GetTookNanos()).Round(time.Millisecond))
	}
}

// shards runs verb (check or publish) on the shard map in file.
func shards(ctx context.Context, cfg config.Config, verb, file string, stdout io.Writer) error {
	m, err := zen.LoadShardMap(file)
	if err == nil {
		err = m.CheckComplete()
	}
	if err == nil {
		err = m.CheckStores(shardStores(cfg.Storage)...)
	}
	if err != nil {
		return err
	}
	switch verb {
	case "check":
		printShardMap(stdout, m)
		return nil
	case "publish":
		if cfg.Storage.ShardMap.ZK == "" {
			return errors.New("shards publish: no ZooKeeper quorum: pass --shard-map-zk (or set SMARTFEED_SHARD_MAP_ZK, or storage.shard_map.zk in the config file)")
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// The processes watching the znode check the map against their own --stores: refuse it
		// here when one of them would, rather than leave in ZooKeeper a map it does not route by.
		if err := shardwatch.CheckPeers(pctx, cfg.Storage.ShardMap.ZK, cfg.Storage.ShardMap.ZKPath, m); err != nil {
			return fmt.Errorf("shards publish: %w", err)
		}
		if err := shardwatch.Publish(pctx, cfg.Storage.ShardMap.ZK, cfg.Storage.ShardMap.ZKPath, m); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "published to %s%s:\n", cfg.Storage.ShardMap.ZK, cfg.Storage.ShardMap.ZKPath)
		printShardMap(stdout, m)
		return nil
	}
	return fmt.Errorf("shards: unknown verb %q (check or publish)", verb)
}

func printShardMap(w io.Writer, m *zen.ShardMap) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tTO\tSTORE\tOPEN")
	for _, r := range m.Ranges() {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%v\n", r.From, r.To, r.Store, r.Open)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d open shards\n", len(m.OpenShards()))
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/shardwatch"
)

const shardsLong = `check FILE validates a shard map file and prints it; publish FILE validates it and pushes it
to the ZooKeeper znode that every running process watches (--shard-map-zk, --shard-map-zk-path).

A shard map is JSON: {"ranges": [{"from": 0, "to": 2047, "store": "default", "open": false},
{"from": 2048, "to": 4095, "store": "default", "open": true}]}. New objects go to open shards
only. Ranges must not overlap or leave gaps, and name a store the processes know.
Flags (each with its SMARTFEED_* twin) may come before or after FILE.`

// newShardsCmd is "smartfeed shards check|publish FILE": it validates shard maps and pushes
// them to ZooKeeper.
func newShardsCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "check a shard map file, or publish it to the ZooKeeper znode running processes watch",
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
	return cmd
}

// shards runs verb (check or publish) on the shard map in file.
func shards(ctx context.Context, cfg config.Config, verb, file string, stdout io.Writer) error {
	m, err := zen.LoadShardMap(file)
	if err == nil {
		err = m.CheckStores(shardStores...)
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

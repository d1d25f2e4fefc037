package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/shardwatch"
)

const shardsUsage = `usage: smartfeed shards check FILE      validate a shard map file and print it
       smartfeed shards publish FILE    validate it and push it to the ZooKeeper znode that every
                                        running process watches (--shard-map-zk, --shard-map-zk-path)

A shard map is JSON: {"ranges": [{"from": 0, "to": 2047, "store": "default", "open": false},
{"from": 2048, "to": 4095, "store": "default", "open": true}]}. New objects go to open shards
only. Ranges must not overlap or leave gaps, and name a store the processes know.
Flags (each with its SMARTFEED_* twin) may come before or after FILE.`

// runShards validates shard maps and pushes them to ZooKeeper.
func runShards(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shards", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), shardsUsage); fs.PrintDefaults() }
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fs.SetOutput(stdout)
		fs.Usage()
		return nil
	}
	verb := args[0]
	rest, err := parseInterleaved(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	cfg, err := config.FromArgs(flag.NewFlagSet("shards", flag.ContinueOnError), nil, os.Getenv)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("shards %s: want one FILE (see smartfeed shards --help)", verb)
	}
	m, err := zen.LoadShardMap(rest[0])
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
			return errors.New("shards publish: no ZooKeeper quorum: set SMARTFEED_SHARD_MAP_ZK (or storage.shard_map.zk in the config file)")
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

// Command smartfeed is SmartFeed's one binary: its subcommands wire config, logging, metrics and
// lifecycle for the worker, generator, feed service and tools.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	installLibLogs()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "smartfeed:", err)
		os.Exit(1)
	}
}

// command is one subcommand: it gets the arguments after its name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists the subcommands. Each lives in its own file of this package.
func commands() map[string]command {
	return map[string]command{
		"version":   {"print the version", runVersion},
		"worker":    {"run the pinlater worker: fanout and upkeep handlers (flags: --help)", serveCommand(roleWorker)},
		"generator": {"run the chunk generator's gRPC service", serveCommand(roleGenerator)},
		"feedsvc":   {"run the feed service (GetFeed, FeedAdmin) and its materialize jobs", serveCommand(roleFeed)},
		"all":       {"run worker, generator and feedsvc in one process", serveCommand(roleAll)},
		"config":    {"validate and print the effective config (defaults, file, env, flags) with secrets masked", runConfig},
		"bench":     {"run the end-to-end benchmark with its peers; writes results.json, report.md and plots", runBench},
		"demo":      {"run everything on loopback over a synthetic graph, with a live summary", runDemo},
		"hedge":     {"show or set the hedging policy live; hedge suggest replays recorded latencies", runHedge},
		"jobs":      {"operate pinlater queues (jobs queues|dead|inspect|retry|delete|pause|resume|rate|drain)", runJobs},
		"resync":    {"queue the whole materialized feed for copying to the standby (a rebuilt standby)", runResync},
		"shards":    {"check a shard map file, or publish it to the ZooKeeper znode running processes watch", runShards},
		"id":        {"decode or encode a zen ID (id decode ID | id encode --shard S --type T --local L)", runID},
		"modshard":  {"print the mod shard of a key (modshard KEY [--n 4096])", runModShard},
	}
}

// run dispatches a subcommand.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stdout, "usage: smartfeed <command> [flags]\n\ncommands:")
		names := make([]string, 0, len(cmds))
		for n := range cmds {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(stdout, "  %-10s %s\n", n, cmds[n].summary)
		}
		return nil
	}
	c, ok := cmds[args[0]]
	if !ok {
		return fmt.Errorf("unknown command %q (run 'smartfeed help')", args[0])
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

// version is set at build time with -ldflags "-X main.version=..."; otherwise runVersion
// reads the module version and VCS revision the Go toolchain stamped into the binary.
var version = "dev"

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	fmt.Fprintln(stdout, "smartfeed", buildVersion())
	return nil
}

// buildVersion is version, or what debug.ReadBuildInfo knows: the module version and the VCS
// revision and time ("+dirty" when the tree had changes).
func buildVersion() string {
	if version != "dev" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	// Go stamps the main module with a pseudo-version made of the VCS revision and time
	// (v0.0.0-20261125175402-4cbd39b6818c+dirty), or a tag's version.
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return version
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	out := rev + dirty
	if at != "" {
		out += " (" + at + ")"
	}
	return out
}

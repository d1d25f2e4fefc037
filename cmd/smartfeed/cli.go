package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/smartfeed/smartfeed/internal/config"
)

// The command line is cobra's (github.com/spf13/cobra): the most used Go CLI library, with
// shell completion built in, help on every command, and pflag flags that may come anywhere on
// the line (`smartfeed jobs --redis-addr X queues` is `smartfeed jobs queues --redis-addr X`).
// Every flag has a SMARTFEED_* twin (config.EnvName) that sets its default: the root's
// PersistentPreRunE applies the twins of the flags not given, and the commands with the
// server configuration resolve it with config.Resolve (defaults < file < environment < flags).

// newRootCmd builds the whole command tree, writing to stdout and stderr. getenv is os.Getenv
// in production.
func newRootCmd(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "smartfeed",
		Short: "SmartFeed's one binary: the worker, generator and feed service, and the tools to operate them",
		Long: `SmartFeed's one binary: the worker, generator and feed service, and the tools to operate them.

Every flag may come anywhere after the command's name, and has a SMARTFEED_* environment twin
(--redis-addr is SMARTFEED_REDIS_ADDR) that sets its default; "smartfeed config --help" lists the
servers' flags, "smartfeed completion bash|zsh|fish" prints a completion script.`,
		Version:       buildVersion(),
		SilenceErrors: true, // main prints the error once, as "smartfeed: ..."
		SilenceUsage:  true, // an error is not a reason to print the whole help
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return config.ApplyEnv(cmd.Flags(), getenv)
		},
	}
	root.SetVersionTemplate("smartfeed {{.Version}}\n")
	// Before the completion command is added: it takes the output writer when it is made.
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newVersionCmd(),
		newServeCmd(roleWorker, "run the pinlater worker: fanout and upkeep handlers", getenv),
		newServeCmd(roleGenerator, "run the chunk generator's gRPC service", getenv),
		newServeCmd(roleFeed, "run the feed service (GetFeed, FeedAdmin) and its materialize jobs", getenv),
		newServeCmd(roleGraph, "run the graph API alone (GraphService, BoardService, IngestService); a worker process runs the jobs it enqueues", getenv),
		newServeCmd(roleAll, "run worker, generator and feedsvc in one process", getenv),
		newConfigCmd(getenv),
		newBenchCmd(getenv),
		newLoadgenCmd(),
		newLoadCmd(getenv),
		newTrainCmd(getenv),
		newDemoCmd(getenv),
		newHedgeCmd(),
		newJobsCmd(getenv),
		newResyncCmd(getenv),
		newShardsCmd(getenv),
		newIDCmd(),
		newModShardCmd(),
	)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	walkCommands(root, func(c *cobra.Command) {
		config.NameEnvTwins(c.LocalNonPersistentFlags())
		config.NameEnvTwins(c.PersistentFlags())
	})
	return root
}

// harnessEnv are the SMARTFEED_* variables the tests, benchmarks and scripts read
// (internal/testenv, scripts/, the make targets), which a shell that ran them may still hold.
var harnessEnv = []string{
	"SMARTFEED_HBASE_ZK", "SMARTFEED_HBASE_STANDBY_ZK", "SMARTFEED_NO_REDIS", "SMARTFEED_NO_HBASE",
	"SMARTFEED_NO_HBASE_STANDBY", "SMARTFEED_CHROMIUM", "SMARTFEED_NO_CHROMIUM", "SMARTFEED_WANT_CHROMIUM",
	"SMARTFEED_LONG", "SMARTFEED_FANOUT_1M", "SMARTFEED_FANOUT_FOLLOWERS", "SMARTFEED_TEST_LOG",
	"SMARTFEED_TEST_MAIN_ARGS", "SMARTFEED_SEED", "SMARTFEED_UPDATE_SCREENSHOTS", "SMARTFEED_HBASE_FAILOVER",
	"SMARTFEED_FAILOVER_REPLICATION", "SMARTFEED_BENCH_FOLLOWERS", "SMARTFEED_DEMO_USERS",
	"SMARTFEED_LOAD_GRPC", "SMARTFEED_LOAD_GRAPH", "SMARTFEED_LOAD_WINDOW", "SMARTFEED_LOAD_WINDOWS",
	"SMARTFEED_LOAD_RATE", "SMARTFEED_LOAD_CONC", "SMARTFEED_SERVICES", "SMARTFEED_TEST_REDIS_ADDR",
	"SMARTFEED_TEST_HBASE_ZK", "SMARTFEED_TEST_HBASE_STANDBY_ZK", "SMARTFEED_HBASE_TEST_ZK",
	"SMARTFEED_MEMORY_RUN", "SMARTFEED_MEMORY_OUT", "SMARTFEED_TEST_STALL_ARGS", "SMARTFEED_REDIS_SENTINEL",
	"SMARTFEED_REDIS_CLUSTER", "SMARTFEED_HBASE_CLUSTER_ZK", "SMARTFEED_HBASE_CLUSTER",
}

// knownEnv returns every SMARTFEED_* variable something reads: the twin of each flag of the
// command tree under root, config.ExtraEnv and harnessEnv.
func knownEnv(root *cobra.Command) map[string]bool {
	known := map[string]bool{}
	for _, n := range append(append([]string{}, config.ExtraEnv...), harnessEnv...) {
		known[n] = true
	}
	walkCommands(root, func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalNonPersistentFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if name, ok := config.EnvTwin(f); ok {
					known[name] = true
				}
			})
		}
	})
	return known
}

// warnUnknownEnv writes a warning to w for each SMARTFEED_* variable of environ that nothing
// reads (a misspelled one would otherwise be ignored without a word).
func warnUnknownEnv(root *cobra.Command, environ []string, w io.Writer) {
	for _, msg := range config.UnknownEnv(environ, knownEnv(root)) {
		fmt.Fprintln(w, "smartfeed: warning:", msg)
	}
}

// walkCommands calls fn on c and every command under it.
func walkCommands(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walkCommands(sub, fn)
	}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version (module version, or VCS revision and time, from the build)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "smartfeed", buildVersion())
			return nil
		},
	}
}

// configFlags binds the server configuration on fs over base, and returns the function that
// resolves it from the parsed flags of the command that runs (cmd.Flags(), which holds fs's
// flags, inherited ones included) and checks it with checkConfig. Every command that takes the
// server configuration, `smartfeed config` and the servers alike, resolves it here, so `config`
// refuses whatever a start would.
func configFlags(fs *pflag.FlagSet, base config.Config, getenv func(string) string) func(*cobra.Command) (config.Config, error) {
	return configFlagsFor(fs, base, getenv, nil)
}

// configFlagsFor is configFlags for a command that opens only the stores uses names for the
// resolved configuration (config.ResolveFor); nil means every store.
func configFlagsFor(fs *pflag.FlagSet, base config.Config, getenv func(string) string, uses func(config.Config) config.Uses) func(*cobra.Command) (config.Config, error) {
	cfg := base
	config.Bind(fs, &cfg)
	return func(cmd *cobra.Command) (config.Config, error) {
		if err := config.ResolveFor(cmd.Flags(), &cfg, base, getenv, uses); err != nil {
			return cfg, err
		}
		return cfg, checkConfig(cfg)
	}
}

// checkConfig checks what a validated configuration hands to the services against the
// services' own validation (the feed service's config), so that nothing config.Validate lets
// through is refused later at start.
func checkConfig(cfg config.Config) error {
	if err := feedConfig(cfg).Validate(); err != nil {
		return fmt.Errorf("invalid config:\nfeed: %w", err)
	}
	return nil
}

// groupRunE is the run function of a command that only groups subcommands: alone (or with
// "help") it prints its help; with anything else it fails.
func groupRunE(cmd *cobra.Command, args []string) error {
	if len(args) == 0 || args[0] == "help" {
		return cmd.Help()
	}
	return fmt.Errorf("%s: unknown command %q (see %s --help)", cmd.CommandPath(), args[0], cmd.CommandPath())
}

// noEnv marks flag name of fs as having no environment twin (see config.NoEnvAnnotation).
func noEnv(fs *pflag.FlagSet, name string) {
	_ = fs.SetAnnotation(name, config.NoEnvAnnotation, []string{"true"})
}

package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/smartfeed/smartfeed/internal/config"
)

// newConfigCmd is "smartfeed config": it validates the configuration the other subcommands
// would run with and prints it, secrets masked; it fails on an invalid config. With --check it
// also checks what `smartfeed all` would stop at when it starts (startChecks) and prints every
// problem instead of the config.
func newConfigCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "validate and print the effective config (defaults, file, env, flags) with secrets masked",
		Long: `Validates the configuration the servers would run with and prints it, secrets masked.
The flags below are the servers' (worker, generator, feedsvc, all); each sets one field, over
the environment twin named in its help, over the --config file, over the default shown.

With --check, it checks everything "smartfeed all" would refuse at start with the same flags,
environment and file: the config's own rules, the listen addresses (each bound for an instant),
the TLS, JWKS and admin token files, the exposure rules of the ports (docs/security.md), the
Pebble data directory and the generator config file. It lists every problem, each with the
flag, environment variable and config file field to change, and exits non-zero if there is
one. It does not dial Redis or HBase.`,
		Args: cobra.NoArgs,
	}
	check := cmd.Flags().Bool("check", false, "check what `smartfeed all` would refuse at start and list every problem (exit 1 if any) instead of printing the config")
	noEnv(cmd.Flags(), "check")
	resolve := configFlags(cmd.Flags(), config.DefaultConfig(), getenv)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := resolve(cmd)
		if !*check {
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), cfg.Masked())
			return nil
		}
		var lines []string
		if err != nil {
			// config.Validate lists its problems one a line under a heading: one item each.
			for _, l := range strings.Split(err.Error(), "\n") {
				if l != "" && !strings.HasSuffix(l, "invalid config:") {
					lines = append(lines, l)
				}
			}
		}
		for _, p := range startChecks(cfg) {
			lines = append(lines, p.String())
		}
		if len(lines) > 0 {
			return fmt.Errorf("smartfeed all would not start with this configuration (%d %s):\n  - %s",
				len(lines), plural(len(lines), "problem", "problems"), strings.Join(lines, "\n  - "))
		}
		fmt.Fprintf(cmd.OutOrStdout(), "config ok: smartfeed all would start with it (public gRPC %s, storage %s)\n",
			cfg.GRPC.Addr, cfg.Storage.Backend)
		return nil
	}
	return cmd
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/smartfeed/smartfeed/internal/config"
)

// newConfigCmd is "smartfeed config": it validates the configuration the other subcommands
// would run with and prints it, secrets masked; it fails on an invalid config.
func newConfigCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "validate and print the effective config (defaults, file, env, flags) with secrets masked",
		Long: `Validates the configuration the servers would run with and prints it, secrets masked.
The flags below are the servers' (worker, generator, feedsvc, all); each sets one field, over
the environment twin named in its help, over the --config file, over the default shown.`,
		Args: cobra.NoArgs,
	}
	resolve := configFlags(cmd.Flags(), config.DefaultConfig(), getenv)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := resolve(cmd)
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), cfg.Masked())
		return nil
	}
	return cmd
}

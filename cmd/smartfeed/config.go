package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/smartfeed/smartfeed/internal/config"
)

// runConfig validates the configuration the other subcommands would run with and prints it,
// secrets masked; it exits non-zero on an invalid config.
func runConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg, err := config.FromArgs(fs, args, os.Getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	fmt.Fprintln(stdout, cfg.Masked())
	return nil
}

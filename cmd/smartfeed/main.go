// Command smartfeed is SmartFeed's one binary: its subcommands wire config, logging, metrics and
// lifecycle for the worker, generator, feed service and tools.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "smartfeed:", err)
		os.Exit(1)
	}
}

// run dispatches a subcommand.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_ = ctx
	_ = stderr
	if len(args) == 0 || args[0] == "help" {
		fmt.Fprintln(stdout, "usage: smartfeed <command> [flags]")
		return nil
	}
	if args[0] == "version" {
		fmt.Fprintln(stdout, "smartfeed dev")
		return nil
	}
	return fmt.Errorf("unknown command %q (run 'smartfeed help')", args[0])
}

package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/smartfeed/smartfeed/internal/config"
)

// TestHelpExitsZero: --help on every command and subcommand of the tree (completion's
// included) prints something and succeeds, without touching Redis or a store.
func TestHelpExitsZero(t *testing.T) {
	var paths [][]string
	walkCommands(newRootCmd(func(string) string { return "" }, io.Discard, io.Discard), func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		// CommandPath is "smartfeed jobs dead"; the arguments are what follows the binary.
		paths = append(paths, strings.Fields(c.CommandPath())[1:])
	})
	if len(paths) < 40 {
		t.Fatalf("only %d commands in the tree", len(paths))
	}
	for _, p := range paths {
		for _, h := range []string{"--help", "-h"} {
			args := append(append([]string{}, p...), h)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var out, errOut bytes.Buffer
			err := run(ctx, args, &out, &errOut)
			cancel()
			if err != nil {
				t.Errorf("smartfeed %v: %v", args, err)
			} else if out.Len() == 0 || !strings.Contains(out.String(), "Usage:") {
				t.Errorf("smartfeed %v: printed no usage on stdout:\n%s", args, out.String())
			}
		}
	}
}

// TestEveryFlagDescribedWithTwin: every flag of every command has a description, and the ones
// with an environment twin name it in their help.
func TestEveryFlagDescribedWithTwin(t *testing.T) {
	n := 0
	walkCommands(newRootCmd(func(string) string { return "" }, io.Discard, io.Discard), func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalNonPersistentFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				n++
				_, noEnv := f.Annotations[config.NoEnvAnnotation]
				switch {
				case strings.TrimSpace(f.Usage) == "":
					t.Errorf("%s --%s: no description", c.CommandPath(), f.Name)
				case f.Hidden || noEnv:
				case !strings.Contains(f.Usage, "[$"+config.EnvName(f.Name)+"]"):
					t.Errorf("%s --%s: help %q does not name $%s", c.CommandPath(), f.Name, f.Usage, config.EnvName(f.Name))
				}
			})
		}
	})
	if n < 100 {
		t.Errorf("only %d flags in the tree", n)
	}
}

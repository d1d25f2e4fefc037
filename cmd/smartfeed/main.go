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

// run builds the command tree (cli.go) and runs the command args name, with the environment
// of the process; it first warns of each SMARTFEED_* variable that no flag has as its twin.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCmd(os.Getenv, stdout, stderr)
	warnUnknownEnv(root, os.Environ(), stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// version is set at build time with -ldflags "-X main.version=..."; otherwise buildVersion
// reads the module version and VCS revision the Go toolchain stamped into the binary.
var version = "dev"

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

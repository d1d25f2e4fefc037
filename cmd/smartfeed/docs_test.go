package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/smartfeed/smartfeed/internal/config"
)

// TestOperationsDocListsEveryFlag keeps docs/operations.md in step with the flags: each server
// flag has a row naming its environment twin, and each demo flag is mentioned.
func TestOperationsDocListsEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	if _, err := config.FromArgs(fs, nil, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	fs.VisitAll(func(f *pflag.Flag) {
		row := "| `--" + f.Name + "` | `" + config.EnvName(f.Name) + "` |"
		if !strings.Contains(doc, row) {
			t.Errorf("docs/operations.md has no row starting %s", row)
		}
	})
	for _, name := range []string{"--demo-users", "--demo-boards", "--demo-interests", "--demo-follows",
		"--demo-events-per-sec", "--demo-reads-per-sec", "--duration"} {
		if !strings.Contains(doc, name) {
			t.Errorf("docs/operations.md does not mention the demo flag %s", name)
		}
	}
}

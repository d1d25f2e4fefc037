package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/smartfeed/smartfeed/zen"
)

// runID is "smartfeed id decode ID" and "smartfeed id encode --shard S --type T --local L".
// idUsage is the help of the id command.
const idUsage = `usage: smartfeed id decode ID
       smartfeed id encode --shard S --type T --local L

decode prints an ID's shard, type and local ID; encode builds one.`

func runID(_ context.Context, args []string, stdout, _ io.Writer) error {
	if wantsHelp(args) {
		fmt.Fprintln(stdout, idUsage)
		return nil
	}
	if len(args) == 0 {
		return errors.New("id: want 'id decode ID' or 'id encode --shard S --type T --local L'")
	}
	switch args[0] {
	case "decode":
		if len(args) != 2 {
			return errors.New("id decode: want exactly one ID")
		}
		id, err := zen.ParseID(args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "shard %d type %d%s local %d\n", id.Shard(), id.Type(), typeName(id.Type()), id.Local())
		return nil
	case "encode":
		fs := flag.NewFlagSet("id encode", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		shard := fs.Uint("shard", 0, "shard, 0–65535")
		typ := fs.String("type", "", "type: a number 1–1023 or pin, board, user, interest")
		local := fs.Uint64("local", 0, "local ID, 0–2^36-1")
		rest, err := parseInterleaved(fs, args[1:])
		if err != nil {
			return fmt.Errorf("id encode: %w", err)
		}
		if len(rest) != 0 {
			return fmt.Errorf("id encode: unexpected argument %q", rest[0])
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, name := range []string{"shard", "type", "local"} {
			if !set[name] {
				return fmt.Errorf("id encode: --%s is required", name)
			}
		}
		if *shard > zen.MaxShard {
			return fmt.Errorf("id encode: shard %d out of range [0, %d]", *shard, zen.MaxShard)
		}
		t, err := parseType(*typ)
		if err != nil {
			return fmt.Errorf("id encode: %w", err)
		}
		id, err := zen.NewID(uint16(*shard), t, *local)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, id)
		return nil
	}
	return fmt.Errorf("id: unknown action %q (want decode or encode)", args[0])
}

// runModShard is "smartfeed modshard KEY [--n 4096]".
func runModShard(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("modshard", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	n := fs.Int("n", 4096, "number of shards")
	rest, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, "usage: smartfeed modshard [--n SHARDS] KEY\n\nprints the mod shard of KEY (md5 as a 128-bit integer mod SHARDS, default 4096)")
		return nil
	}
	if err != nil {
		return fmt.Errorf("modshard: %w", err)
	}
	if len(rest) != 1 {
		return errors.New("modshard: want exactly one KEY")
	}
	if *n < 1 || *n > zen.MaxShard+1 {
		return fmt.Errorf("modshard: --n %d out of range [1, %d]", *n, zen.MaxShard+1)
	}
	fmt.Fprintln(stdout, zen.ModShard(rest[0], *n))
	return nil
}

// parseInterleaved parses flags that may come before or after positional arguments and returns
// the positional ones. "--" ends the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func parseType(s string) (zen.Type, error) {
	for _, t := range []zen.Type{zen.TypePin, zen.TypeBoard, zen.TypeUser, zen.TypeInterest} {
		if strings.EqualFold(s, t.String()) {
			return t, nil
		}
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || n > zen.MaxType {
		return 0, fmt.Errorf("type %q: want 1–%d or pin, board, user, interest", s, zen.MaxType)
	}
	return zen.Type(n), nil
}

func typeName(t zen.Type) string {
	switch t {
	case zen.TypePin, zen.TypeBoard, zen.TypeUser, zen.TypeInterest:
		return " (" + t.String() + ")"
	}
	return ""
}

// wantsHelp reports whether args ask for help (-h, -help or --help before any "--").
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help", "help":
			return true
		}
	}
	return false
}

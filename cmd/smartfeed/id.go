package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/smartfeed/smartfeed/zen"
)

// newIDCmd is "smartfeed id decode ID" and "smartfeed id encode --shard S --type T --local L".
func newIDCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "id",
		Short: "decode or encode a zen ID (id decode ID | id encode --shard S --type T --local L)",
		Long:  "decode prints an ID's shard, type and local ID; encode builds one.",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("id: want 'id decode ID' or 'id encode --shard S --type T --local L'")
			}
			if args[0] == "help" {
				return cmd.Help()
			}
			return fmt.Errorf("id: unknown action %q (want decode or encode)", args[0])
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "decode ID",
		Short: "print an ID's shard, type and local ID",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return errors.New("id decode: want exactly one ID")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := zen.ParseID(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "shard %d type %d%s local %d\n", id.Shard(), id.Type(), typeName(id.Type()), id.Local())
			return nil
		},
	})
	var shard uint
	var typ string
	var local uint64
	enc := &cobra.Command{
		Use:   "encode --shard S --type T --local L",
		Short: "build an ID from its shard, type and local ID",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 0 {
				return fmt.Errorf("id encode: unexpected argument %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"shard", "type", "local"} {
				if !cmd.Flags().Changed(name) {
					return fmt.Errorf("id encode: --%s is required", name)
				}
			}
			if shard > zen.MaxShard {
				return fmt.Errorf("id encode: shard %d out of range [0, %d]", shard, zen.MaxShard)
			}
			t, err := parseType(typ)
			if err != nil {
				return fmt.Errorf("id encode: %w", err)
			}
			id, err := zen.NewID(uint16(shard), t, local)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), id)
			return nil
		},
	}
	enc.Flags().UintVar(&shard, "shard", 0, "shard, 0–65535")
	enc.Flags().StringVar(&typ, "type", "", "type: a number 1–1023 or pin, board, user, interest")
	enc.Flags().Uint64Var(&local, "local", 0, "local ID, 0–2^36-1")
	cmd.AddCommand(enc)
	return cmd
}

// newModShardCmd is "smartfeed modshard KEY [--n 4096]".
func newModShardCmd() *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:   "modshard KEY",
		Short: "print the mod shard of a key (modshard KEY [--n 4096])",
		Long:  "Prints the mod shard of KEY: md5 as a 128-bit integer mod --n. A KEY that starts with '-' goes after --.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return errors.New("modshard: want exactly one KEY")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 || n > zen.MaxShard+1 {
				return fmt.Errorf("modshard: --n %d out of range [1, %d]", n, zen.MaxShard+1)
			}
			fmt.Fprintln(cmd.OutOrStdout(), zen.ModShard(args[0], n))
			return nil
		},
	}
	cmd.Flags().IntVar(&n, "n", 4096, "number of shards")
	return cmd
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

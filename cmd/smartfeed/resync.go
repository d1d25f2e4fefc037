package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/zen"
)

// newResyncCmd is "smartfeed resync": it queues every row of the materialized feed (primary
// and standby) for copying to the standby, through the primary's change log: the repair for a
// standby that was rebuilt or lost writes. The feed service applies the entries (the running
// one, or the next to start). With --user it repairs one user's rows at once instead
// (feedsvc.Resync: copied to the standby, the standby's extra rows deleted): the repair after
// dropped replication writes or a crash with writes still queued. With the embedded store the
// feed service must be stopped (Pebble allows one process); with HBase's own replication the
// repair is HBase's (its CopyTable or SyncTable jobs), so it refuses.
func newResyncCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resync",
		Short: "queue the whole materialized feed for copying to the standby (a rebuilt standby)",
		Long: `Queues every materialized-feed row for copying to the standby; the feed service applies them.
With --user, copies that user's rows to the standby now and deletes the standby's rows the primary lacks.
Takes the same storage flags (and SMARTFEED_* twins) as the servers.`,
		Args: cobra.NoArgs,
	}
	var userFlag string
	cmd.Flags().StringVar(&userFlag, "user", "", "repair only this user's rows (a user ID), directly on the standby")
	noEnv(cmd.Flags(), "user")
	resolve := configFlags(cmd.Flags(), config.DefaultConfig(), getenv)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := resolve(cmd)
		if err != nil {
			return err
		}
		var user zen.ID
		if userFlag != "" {
			if user, err = zen.ParseID(userFlag); err == nil {
				err = user.Check(zen.TypeUser)
			}
			if err != nil {
				return fmt.Errorf("resync --user: %w", err)
			}
		}
		return resync(cmd.Context(), cfg, user, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	return cmd
}

// resync queues the whole feed for the standby, or repairs user's rows when user is not 0.
func resync(ctx context.Context, cfg config.Config, user zen.ID, stdout, stderr io.Writer) error {
	if cfg.Storage.Backend == config.BackendHBase && cfg.Storage.HBase.NativeReplication() {
		return errors.New("resync: HBase replicates this feed itself (storage.hbase.replication); " +
			"repair a rebuilt standby with HBase's CopyTable or SyncTable")
	}
	st := newStores(cfg.Storage, zap.NewNop(), nil)
	defer func() { _ = st.close() }()
	primary, err := st.table(ctx, storePrimary, tableFeed)
	if err != nil {
		return fmt.Errorf("resync: %w (with the embedded store, stop the feed service first)", err)
	}
	standby, err := st.table(ctx, storeStandby, tableFeed)
	if err != nil {
		return fmt.Errorf("resync: %w", err)
	}
	if user != 0 {
		n, err := feedsvc.Resync(ctx, primary, standby, user)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "resync: user %d: %d standby rows changed\n", user, n)
		return nil
	}
	n, err := feedsvc.ResyncAll(ctx, primary, standby, func(n int) {
		if n%100000 == 0 {
			fmt.Fprintf(stderr, "resync: %d rows queued\n", n)
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "resync: %d rows queued in the primary's change log; the feed service copies them to the standby\n", n)
	return nil
}

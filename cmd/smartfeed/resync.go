package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/internal/config"
)

// runResync queues every row of the materialized feed (primary and standby) for copying to the
// standby, through the primary's change log: the repair for a standby that was rebuilt or lost
// writes. The feed service applies the entries (the running one, or the next to start). With
// the embedded store the feed service must be stopped (Pebble allows one process); with HBase's
// own replication the repair is HBase's (its CopyTable or SyncTable jobs), so it refuses.
func runResync(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("resync", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: smartfeed resync [flags]\n\n"+
			"Queues every materialized-feed row for copying to the standby; the feed service applies them.\n"+
			"Takes the same storage flags (and SMARTFEED_* twins) as the servers:")
		fs.PrintDefaults()
	}
	cfg, err := config.FromArgs(fs, args, os.Getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if cfg.Storage.Backend == config.BackendHBase && cfg.Storage.HBase.NativeReplication() {
		return errors.New("resync: HBase replicates this feed itself (storage.hbase.replication); " +
			"repair a rebuilt standby with HBase's CopyTable or SyncTable")
	}
	st := newStores(cfg.Storage, zap.NewNop())
	defer func() { _ = st.close() }()
	primary, err := st.table(ctx, storePrimary, tableFeed)
	if err != nil {
		return fmt.Errorf("resync: %w (with the embedded store, stop the feed service first)", err)
	}
	standby, err := st.table(ctx, storeStandby, tableFeed)
	if err != nil {
		return fmt.Errorf("resync: %w", err)
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

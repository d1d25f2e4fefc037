package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
)

// showReplication prints the standby's replication (FeedAdmin.GetReplication) for hedge show:
// whether a failover to the standby would serve, and how stale.
func showReplication(ctx context.Context, c feedv1.FeedAdminClient, w io.Writer) {
	r, err := c.GetReplication(ctx, &feedv1.GetReplicationRequest{})
	if err != nil {
		fmt.Fprintf(w, "\nreplication: unavailable (%v)\n", err)
		return
	}
	fmt.Fprintln(w)
	printReplication(w, r)
}

func printReplication(w io.Writer, r *feedv1.Replication) {
	d := fmtLagMs
	how := map[string]string{
		"hbase": "HBase replication (canary row every 1 s)",
		"app":   "change-log replicator",
	}[r.GetMechanism()]
	if how == "" {
		how = "unknown"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "standby fed by\t%s\n", how)
	fmt.Fprintf(tw, "replication lag\t%s\n", d(r.GetLagMs()))
	if r.GetMaxStalenessMs() > 0 {
		fmt.Fprintf(tw, "staleness bound\t%s\n", d(r.GetMaxStalenessMs()))
	} else {
		fmt.Fprintf(tw, "staleness bound\tnone (standby reads never refused)\n")
	}
	if r.GetStandbyRefused() {
		fmt.Fprintf(tw, "standby reads\tREFUSED: lag over the bound, hedges and failover wait for the primary\n")
	} else {
		fmt.Fprintf(tw, "standby reads\tserved\n")
	}
	fmt.Fprintf(tw, "refused as stale\t%d since start\n", r.GetStaleRefusals())
	if n := r.GetRecentCount(); n > 0 {
		fmt.Fprintf(tw, "recent lag\tp50 %s, p99 %s, max %s (last %d measurements)\n", d(r.GetRecentP50Ms()), d(r.GetRecentP99Ms()), d(r.GetRecentMaxMs()), n)
	} else {
		fmt.Fprintf(tw, "recent lag\tno measurement yet\n")
	}
	_ = tw.Flush()
}

// fmtLagMs prints a lag given in ms: ms below 10 s, seconds above.
func fmtLagMs(v float64) string {
	if v >= 10000 {
		return (time.Duration(v * float64(time.Millisecond))).Round(100 * time.Millisecond).String()
	}
	if v < 10 {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

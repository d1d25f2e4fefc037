package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
)

// hedgeFlags are the connection flags every hedge subcommand takes.
type hedgeFlags struct {
	grpcAddr, adminAddr string
	dial                adminDial
	timeout             time.Duration
}

func (h *hedgeFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&h.grpcAddr, "admin-grpc-addr", "127.0.0.1:9092", "admin gRPC address of the feed service (FeedAdmin)")
	fs.StringVar(&h.dial.tokenFile, "admin-token-file", "", "file holding the admin credential, when the admin port requires one")
	fs.StringVar(&h.dial.caFile, "admin-ca-file", "", "CA certificate to verify the admin ports' TLS certificate against (empty: plaintext)")
	fs.StringVar(&h.dial.serverName, "admin-server-name", "", "name to verify the admin port's certificate for (empty: the host dialled)")
	fs.StringVar(&h.adminAddr, "admin-addr", "127.0.0.1:9091", "admin HTTP address of the same process (/metrics)")
	fs.DurationVar(&h.timeout, "timeout", 5*time.Second, "bound of each call")
}

// newHedgeCmd is "smartfeed hedge [show|set|suggest]": the live hedging policy of a feed
// service, through its admin ports.
func newHedgeCmd() *cobra.Command {
	var hf hedgeFlags
	cmd := &cobra.Command{
		Use:   "hedge",
		Short: "show or set the hedging policy live; hedge suggest replays recorded latencies",
		Long: `Shows or changes the hedging policy of a running feed service, through its admin ports.
Alone, hedge is hedge show.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return groupRunE(cmd, args)
			}
			return hedgeShow(cmd.Context(), hf, cmd.OutOrStdout())
		},
	}
	hf.bind(cmd.PersistentFlags())
	cmd.AddCommand(&cobra.Command{
		Use:   "show",
		Short: "the hedging policy in force, the cutoff in use, the standby's replication lag and staleness bound (and whether its reads are refused as stale), and the read latency percentiles of the primary and the standby",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return hedgeShow(cmd.Context(), hf, cmd.OutOrStdout())
		},
	})
	cmd.AddCommand(newHedgeSetCmd(&hf), newHedgeSuggestCmd(&hf))
	return cmd
}

// newHedgeSetCmd is hedge set: a live change of the flags given, over the admin ports of hf.
func newHedgeSetCmd(hf *hedgeFlags) *cobra.Command {
	set := &cobra.Command{
		Use:   "set",
		Short: "change the policy live; only the flags given change",
		Args:  cobra.NoArgs,
	}
	var mode string
	var cutoff, minC, maxC time.Duration
	var pct, budget, warmup float64
	fs := set.Flags()
	fs.StringVar(&mode, "mode", "", "off, fixed or percentile")
	fs.DurationVar(&cutoff, "cutoff", 0, "fixed cutoff, in (0, 10s] and below the primary timeout (sets mode fixed unless --mode is given)")
	fs.Float64Var(&pct, "percentile", 0, "percentile of the primary's latency used as the cutoff (percentile mode)")
	fs.DurationVar(&minC, "min", 0, "lowest percentile cutoff")
	fs.DurationVar(&maxC, "max", 0, "highest percentile cutoff")
	fs.Float64Var(&budget, "budget", 0, "largest fraction of calls that may hedge on the cutoff, in [0, 1]")
	fs.Float64Var(&warmup, "warmup", 0, "fraction of calls that also read the standby, in [0, 1]")
	// A live change takes its values from the command line only: a variable left set in a
	// shell (SMARTFEED_MODE=off) must not change a running service's policy.
	fs.VisitAll(func(f *pflag.Flag) { noEnv(fs, f.Name) })
	set.RunE = func(cmd *cobra.Command, _ []string) error {
		given := map[string]bool{}
		nflags := 0
		set.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if f.Changed {
				given[f.Name] = true
				nflags++
			}
		})
		if given["cutoff"] && (cutoff <= 0 || cutoff > hedge.MaxDelay) {
			return fmt.Errorf("hedge set: --cutoff %v: want a duration in (0, %v]", cutoff, hedge.MaxDelay)
		}
		return hedgeSet(cmd.Context(), *hf, cmd.OutOrStdout(), func(p *hedge.Policy) {
			if given["cutoff"] {
				p.Delay = cutoff
				if !given["mode"] {
					p.Mode = hedge.ModeFixed
				}
			}
			if given["mode"] {
				p.Mode = hedge.Mode(mode)
			}
			if given["percentile"] {
				p.Percentile = pct
			}
			if given["min"] {
				p.Min = minC
			}
			if given["max"] {
				p.Max = maxC
			}
			if given["budget"] {
				p.Budget = budget
			}
			if given["warmup"] {
				p.Warmup = warmup
			}
		}, nflags)
	}
	return set
}

// newHedgeSuggestCmd is hedge suggest: the recorded latencies replayed for candidate cutoffs.
func newHedgeSuggestCmd(hf *hedgeFlags) *cobra.Command {
	suggest := &cobra.Command{
		Use:   "suggest",
		Short: "replay the recorded latencies for candidate cutoffs and print the expected hedge rate, extra load and p99.9 of each",
		Args:  cobra.NoArgs,
	}
	var cutoffs string
	var samples int
	suggest.Flags().StringVar(&cutoffs, "cutoffs", "1ms,2ms,5ms,10ms,20ms,50ms,100ms", "candidate cutoffs, comma-separated")
	suggest.Flags().IntVar(&samples, "samples", 200000, "calls replayed per cutoff")
	suggest.RunE = func(cmd *cobra.Command, _ []string) error {
		cs, err := parseCutoffs(cutoffs)
		if err != nil {
			return err
		}
		return hedgeSuggest(cmd.Context(), *hf, cmd.OutOrStdout(), cs, samples)
	}
	return suggest
}

func parseCutoffs(s string) ([]time.Duration, error) {
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("cutoff %q: want a positive duration like 10ms", f)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("--cutoffs: no cutoff given")
	}
	return out, nil
}

func adminClient(hf hedgeFlags) (feedv1.FeedAdminClient, func(), error) {
	conn, err := hf.dial.grpc(hf.grpcAddr)
	if err != nil {
		return nil, nil, err
	}
	return feedv1.NewFeedAdminClient(conn), func() { _ = conn.Close() }, nil
}

func printPolicy(w io.Writer, p *feedv1.HedgePolicy) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "mode\t%s\n", p.GetMode())
	fmt.Fprintf(tw, "cutoff in use\t%.2fms\n", p.GetCurrentCutoffMs())
	fmt.Fprintf(tw, "fixed delay\t%.2fms\n", p.GetDelayMs())
	fmt.Fprintf(tw, "percentile\tp%g clamped to [%.2fms, %.2fms] (after %d samples)\n", p.GetPercentile(), p.GetMinMs(), p.GetMaxMs(), p.GetMinSamples())
	fmt.Fprintf(tw, "budget\t%.2f%% extra load (burst %g)\n", 100*p.GetBudget(), p.GetBudgetBurst())
	fmt.Fprintf(tw, "warm-up\t%.2f%% of calls also read the standby\n", 100*p.GetWarmup())
	_ = tw.Flush()
}

func hedgeShow(ctx context.Context, hf hedgeFlags, w io.Writer) error {
	c, done, err := adminClient(hf)
	if err != nil {
		return err
	}
	defer done()
	cctx, cancel := context.WithTimeout(ctx, hf.timeout)
	defer cancel()
	p, err := c.GetHedgePolicy(cctx, &feedv1.GetHedgePolicyRequest{})
	if err != nil {
		return fmt.Errorf("get hedge policy from %s: %w", hf.grpcAddr, hf.dial.explain(err))
	}
	fmt.Fprintf(w, "hedging policy of %s\n", hf.grpcAddr)
	printPolicy(w, p)
	showReplication(cctx, c, w)
	primary, standby, err := fetchLatency(cctx, hf)
	if err != nil {
		fmt.Fprintf(w, "\nlatency: unavailable (%v)\n", err)
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\treads\tp50\tp90\tp99\tp99.9\t")
	for _, s := range []struct {
		name string
		h    hedge.Histogram
	}{{"primary", primary}, {"standby", standby}} {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", s.name, s.h.Count(), fmtMs(s.h.Quantile(0.5)), fmtMs(s.h.Quantile(0.9)),
			fmtMs(s.h.Quantile(0.99)), fmtMs(s.h.Quantile(0.999)))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "(percentiles interpolated from the histogram buckets of "+hedge.ReadLatencyMetric+")")
	return nil
}

// hedgeSet reads the policy in force, changes it as hedge.Policy, and sends it back; the server
// validates it (hedge.Policy.Validate) and keeps the knobs the wire form does not carry.
func hedgeSet(ctx context.Context, hf hedgeFlags, w io.Writer, change func(*hedge.Policy), nflags int) error {
	if nflags == 0 {
		return errors.New("hedge set: nothing to change (give --cutoff, --mode, --percentile, --min, --max, --budget or --warmup)")
	}
	c, done, err := adminClient(hf)
	if err != nil {
		return err
	}
	defer done()
	cctx, cancel := context.WithTimeout(ctx, hf.timeout)
	defer cancel()
	p, err := c.GetHedgePolicy(cctx, &feedv1.GetHedgePolicyRequest{})
	if err != nil {
		return fmt.Errorf("get hedge policy from %s: %w", hf.grpcAddr, hf.dial.explain(err))
	}
	pol, err := feedsvc.HedgePolicyFromProto(p, hedge.DefaultPolicy())
	if err != nil {
		return fmt.Errorf("hedge policy from %s: %w", hf.grpcAddr, hf.dial.explain(err))
	}
	change(&pol)
	if err := pol.Validate(); err != nil {
		return fmt.Errorf("hedge set: %w", err)
	}
	got, err := c.SetHedgePolicy(cctx, feedsvc.HedgePolicyProto(pol, 0))
	if err != nil {
		return fmt.Errorf("set hedge policy: %w", err)
	}
	fmt.Fprintf(w, "hedging policy of %s is now\n", hf.grpcAddr)
	printPolicy(w, got)
	return nil
}

func hedgeSuggest(ctx context.Context, hf hedgeFlags, w io.Writer, cutoffs []time.Duration, samples int) error {
	cctx, cancel := context.WithTimeout(ctx, hf.timeout)
	defer cancel()
	budget, burst := -1.0, 10.0
	if c, done, err := adminClient(hf); err == nil {
		if p, err := c.GetHedgePolicy(cctx, &feedv1.GetHedgePolicyRequest{}); err == nil {
			budget, burst = p.GetBudget(), p.GetBudgetBurst()
		}
		done()
	}
	if budget < 0 {
		return fmt.Errorf("hedge suggest: cannot read the budget from %s", hf.grpcAddr)
	}
	primary, standby, err := fetchLatency(cctx, hf)
	if err != nil && !errors.Is(err, hedge.ErrNoReadLatency) {
		// FeedAdmin answered, so this is a feed process: without the series it has read
		// nothing yet, which the check below answers.
		return err
	}
	if primary.Count() == 0 || standby.Count() == 0 {
		// A process that has served no feed yet (a fresh start) has nothing to replay: that is
		// an answer, not a failure, and it says how to get one.
		fmt.Fprintf(w, "nothing to replay yet: %s has recorded %d primary and %d standby reads.\n", hf.adminAddr, primary.Count(), standby.Count())
		fmt.Fprintln(w, "Each GetFeed page records a primary read; hedges and the warm-up fraction of pages record standby reads")
		fmt.Fprintln(w, "(smartfeed hedge set --warmup 0.1 records more). Serve some feeds, then ask again.")
		return nil
	}
	rows, err := hedge.Suggest(primary, standby, append([]time.Duration{0}, cutoffs...), budget, burst, samples, 1)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "replaying %d calls drawn from %d primary and %d standby reads, budget %.2f%%:\n", samples, primary.Count(), standby.Count(), 100*budget)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cutoff\thedge rate\textra load\tp50\tp99\tp99.9\t")
	for _, r := range rows {
		name := "no hedge"
		if r.Cutoff > 0 {
			name = r.Cutoff.String()
		}
		fmt.Fprintf(tw, "%s\t%.2f%%\t%.2f%%\t%s\t%s\t%s\t\n", name, 100*r.HedgeRate, 100*r.ExtraLoad, fmtMs(r.P50), fmtMs(r.P99), fmtMs(r.P999))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "set one with: smartfeed hedge set --cutoff <d>  (or --percentile for a moving cutoff)")
	return nil
}

// fetchLatency scrapes the admin port's /metrics for the read latency histograms.
func fetchLatency(ctx context.Context, hf hedgeFlags) (primary, standby hedge.Histogram, err error) {
	client, url, err := hf.dial.http(hf.adminAddr, "/metrics")
	if err != nil {
		return primary, standby, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return primary, standby, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return primary, standby, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return primary, standby, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return hedge.ParseReadLatency(resp.Body)
}

// bearerCreds sends a bearer token with every call (over plaintext too: an admin port without
// TLS is on loopback).
type bearerCreds string

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (b bearerCreds) RequireTransportSecurity() bool { return false }

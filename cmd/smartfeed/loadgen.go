package main

import (
	"github.com/spf13/cobra"

	"github.com/smartfeed/smartfeed/bench/loadgen"
)

// newLoadgenCmd is "smartfeed loadgen": the load generator (bench/loadgen) in a process of its
// own, against a running server. smartfeed bench runs it for its serving measurements.
func newLoadgenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "loadgen",
		Short: "offer GetFeed, Redis ZREVRANGE and empty gRPC calls at fixed rates to a running server; prints a JSON line per window",
		Long: `Open-loop load: calls scheduled at each offered rate whatever the earlier ones did, at most --in-flight
outstanding, latency counted from each call's scheduled start (queueing included) and from its send.
Each kind of call has contiguous windows (--window), the kinds alternating, the server idle before
each (--metrics-url). Prints one JSON line per window and a summary line last; a line per window on
stderr. See docs/benchmarks.md.`,
		Args: cobra.NoArgs,
	}
	o := loadgen.DefaultOptions()
	fs := cmd.Flags()
	fs.StringVar(&o.GRPCAddr, "grpc-addr", "127.0.0.1:9090", "the feed service's public gRPC address (GetFeed; the empty call on the same connection)")
	fs.StringVar(&o.TokenFile, "token-file", "", "a bearer token sent with every gRPC call (empty: none, for a loopback server without authentication)")
	fs.StringVar(&o.RedisAddr, "redis-addr", "127.0.0.1:6379", "the Redis holding the sorted-set peer's feeds")
	fs.StringVar(&o.RedisPass, "redis-password", "", "that Redis's password")
	fs.IntVar(&o.RedisDB, "redis-db", 0, "that Redis's database")
	fs.StringVar(&o.RedisPrefix, "redis-prefix", "", "the peer's key prefix: user U's feed is the sorted set PREFIX+U")
	fs.StringVar(&o.UsersFile, "users-file", "", "the users to read, one ID a line")
	fs.StringSliceVar(&o.Kinds, "kinds", o.Kinds, "kinds of call, in their order in each round: getfeed, redis_zrevrange, grpc_floor")
	fs.Float64SliceVar(&o.Rates, "rates", o.Rates, "offered rates (calls/s), stepped up; a kind goes on past a rate only while it holds p99 from schedule under --p99-bound")
	fs.Float64SliceVar(&o.ReportRates, "report-rates", o.ReportRates, "rates every kind is measured at, held or not")
	fs.DurationVar(&o.Window, "window", o.Window, "each window's length of scheduled calls")
	fs.DurationVar(&o.Overrun, "overrun", o.Overrun, "how long past a window's end its late calls may still be sent (the others are counted unsent)")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "windows of each kind at each rate, alternating (A B C A B C: 2)")
	fs.IntVar(&o.InFlight, "in-flight", o.InFlight, "calls outstanding at most")
	fs.DurationVar(&o.CallTimeout, "call-timeout", o.CallTimeout, "bound of each call")
	fs.DurationVar(&o.Bound, "p99-bound", o.Bound, "a rate is held when the p99 from schedule is under this")
	fs.IntVar(&o.PageSize, "page-size", o.PageSize, "GetFeed's page size and the ZREVRANGE's length")
	fs.Float64Var(&o.ZipfS, "zipf-s", o.ZipfS, "skew of the users' visit rate (Zipf exponent, > 1; ≤ 1: uniform)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the users' draw")
	fs.StringVar(&o.MetricsURL, "metrics-url", "", "the server's /metrics, polled before each window until its background work is done (empty: no wait)")
	fs.StringSliceVar(&o.IdleCounters, "idle-counters", o.IdleCounters, "counters of the server's background work: idle when none moved for --idle-quiet")
	fs.StringSliceVar(&o.IdleGauges, "idle-gauges", nil, "gauges of work in flight or queue depths: idle only when all are 0")
	fs.DurationVar(&o.IdleQuiet, "idle-quiet", o.IdleQuiet, "how long the idle counters must stand still")
	fs.DurationVar(&o.IdleMax, "idle-max", o.IdleMax, "longest wait for an idle server before a window (then the window runs, with a warning)")
	fs.IntVar(&o.GOMAXPROCS, "gomaxprocs", 0, "the generator's GOMAXPROCS (0: the runtime's)")
	fs.StringVar(&o.CPUs, "cpus", "", "CPU list the generator runs on (\"1\", \"0-1\"; empty: inherited)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return loadgen.Main(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	return cmd
}

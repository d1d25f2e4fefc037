package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/quote"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
)

// Options are `smartfeed loadgen`'s flags: the target, the population and the Config's knobs.
type Options struct {
	GRPCAddr  string // the feed service's public gRPC address
	TokenFile string // a bearer token sent with every gRPC call (empty: none, as on a loopback server without authentication)
	RedisAddr string // the Redis holding the sorted-set peer's feeds
	RedisPass string
	RedisDB   int
	// RedisPrefix is the peer's key prefix: user u's feed is the sorted set RedisPrefix+u, read
	// with ZREVRANGE 0..PageSize-1 (ZRANGE REV).
	RedisPrefix string
	UsersFile   string // user IDs, one a line
	Kinds       []string
	Rates       []float64
	ReportRates []float64
	Window      time.Duration
	Overrun     time.Duration
	Rounds      int
	InFlight    int
	CallTimeout time.Duration
	Bound       time.Duration
	PageSize    int
	ZipfS       float64
	Seed        uint64
	// MetricsURL is the server's /metrics, polled for idleness before each window (empty: no
	// wait); IdleCounters, IdleGauges, IdleQuiet and IdleMax are MetricsIdle's.
	MetricsURL   string
	IdleCounters []string
	IdleGauges   []string
	IdleQuiet    time.Duration
	IdleMax      time.Duration
	// GOMAXPROCS (0: the runtime's) and CPUs (a CPU list; empty: the inherited affinity) fix
	// the generator's own CPU, the same for every kind of call.
	GOMAXPROCS int
	CPUs       string
}

// DefaultOptions are the flags' defaults: the 20 s windows, 64 in flight, rates 200,
// 1,000 and 5,000/s compared, stepped on while held.
func DefaultOptions() Options {
	return Options{Kinds: []string{KindGetFeed, KindRedis, KindFloor}, Rates: []float64{200, 1000, 2000, 5000, 10000},
		ReportRates: []float64{200, 1000, 5000}, Window: 20 * time.Second, Overrun: 5 * time.Second, Rounds: 1, InFlight: 64,
		CallTimeout: 10 * time.Second, Bound: 10 * time.Millisecond, PageSize: 50, ZipfS: 1.1, Seed: 1,
		IdleCounters: DefaultIdleCounters, IdleQuiet: 2 * time.Second, IdleMax: time.Minute}
}

// Record is one line of the generator's output: a window as it ends, or the run's summary last.
type Record struct {
	Window  *Window  `json:"window,omitempty"`
	Summary *Summary `json:"summary,omitempty"`
}

// Report is the generator's whole output.
type Report struct {
	Windows []Window
	Summary *Summary
	// PeakRSSMiB is the generator process's peak resident set, as its summary says (0 when
	// unknown).
	PeakRSSMiB float64
}

// ReadReport reads the generator's output (Records, one a line).
func ReadReport(r io.Reader) (*Report, error) {
	rep := &Report{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var rec Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return nil, fmt.Errorf("loadgen output: %w", err)
		}
		if rec.Window != nil {
			rep.Windows = append(rep.Windows, *rec.Window)
		}
		if rec.Summary != nil {
			rep.Summary = rec.Summary
			rep.PeakRSSMiB = rec.Summary.PeakRSSMiB
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("loadgen output: %w", err)
	}
	if rep.Summary == nil {
		return nil, errors.New("loadgen output: no summary (the run did not finish)")
	}
	return rep, nil
}

// Main runs the generator with o against a running server: the Records to out, a line per
// window to log.
func Main(ctx context.Context, o Options, out, log io.Writer) error {
	if o.GOMAXPROCS > 0 {
		runtime.GOMAXPROCS(o.GOMAXPROCS)
	}
	if o.CPUs != "" {
		cpus, err := ParseCPUList(o.CPUs)
		if err != nil {
			return err
		}
		if err := SetAffinity(cpus); err != nil {
			return err
		}
	}
	users, err := readUsers(o.UsersFile)
	if err != nil {
		return err
	}
	pick, err := ZipfPicker(users, o.ZipfS, o.Seed)
	if err != nil {
		return err
	}
	kinds, closeKinds, err := dialKinds(o)
	if err != nil {
		return err
	}
	defer closeKinds()
	cfg := Config{Kinds: kinds, Rates: o.Rates, ReportRates: o.ReportRates, Window: o.Window, Overrun: o.Overrun, Rounds: o.Rounds,
		InFlight: o.InFlight, CallTimeout: o.CallTimeout, Bound: o.Bound, Picker: pick, Log: log}
	if o.MetricsURL != "" {
		cfg.Idle = MetricsIdle{URL: o.MetricsURL, Counters: o.IdleCounters, Gauges: o.IdleGauges, Quiet: o.IdleQuiet, Max: o.IdleMax}.Wait
	}
	enc := json.NewEncoder(out)
	var werr error
	cfg.OnWindow = func(w Window) {
		if err := enc.Encode(Record{Window: &w}); err != nil && werr == nil {
			werr = err
		}
	}
	m := Describe()
	fmt.Fprintf(log, "loadgen: %s at %v/s, %v windows ×%d rounds, %d in flight, GOMAXPROCS %d, CPUs %s of %d, %d users (Zipf s=%g)\n",
		strings.Join(o.Kinds, ", "), o.Rates, o.Window, max(o.Rounds, 1), o.InFlight, m.GOMAXPROCS, m.Affinity, m.Cores, len(users), o.ZipfS)
	_, sum, err := Run(ctx, cfg)
	if sum != nil {
		sum.Population = fmt.Sprintf("%d users, drawn with a Zipf-skewed visit rate (s=%g, seed %d)", len(users), o.ZipfS, o.Seed)
		if o.ZipfS <= 1 {
			sum.Population = fmt.Sprintf("%d users, drawn uniformly (seed %d)", len(users), o.Seed)
		}
		sum.PeakRSSMiB, _ = PeakRSSMiB(0)
		if e := enc.Encode(Record{Summary: sum}); e != nil && werr == nil {
			werr = e
		}
	}
	return errors.Join(err, werr)
}

// readUsers reads user IDs, one a line.
func readUsers(path string) ([]uint64, error) {
	if path == "" {
		return nil, errors.New("loadgen: --users-file is required")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loadgen: users: %w", err)
	}
	defer f.Close()
	var users []uint64
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		u, err := strconv.ParseUint(line, 10, 64)
		if err != nil || u == 0 {
			return nil, fmt.Errorf("loadgen: users file line %d: not a user ID", n)
		}
		users = append(users, u)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("loadgen: users: %w", err)
	}
	return users, nil
}

// dialKinds connects to the targets of o.Kinds: GetFeed and the empty call (the gRPC health
// check) share one gRPC connection, the Redis peer its own client.
func dialKinds(o Options) ([]Kind, func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	var token string
	if o.TokenFile != "" {
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return nil, nil, fmt.Errorf("loadgen: token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	withToken := func(ctx context.Context) context.Context {
		if token == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	var conn *grpc.ClientConn
	grpcConn := func() (*grpc.ClientConn, error) {
		if conn != nil {
			return conn, nil
		}
		if o.GRPCAddr == "" {
			return nil, errors.New("loadgen: --grpc-addr is required for GetFeed and the empty call")
		}
		c, err := grpc.NewClient(o.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("loadgen: %w", err)
		}
		conn = c
		closers = append(closers, func() { _ = c.Close() })
		return c, nil
	}
	var kinds []Kind
	for _, name := range o.Kinds {
		switch name {
		case KindGetFeed:
			c, err := grpcConn()
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			kinds = append(kinds, Kind{Name: name, Call: getFeedCall(feedv1.NewFeedServiceClient(c), withToken, int32(o.PageSize))})
		case KindFloor:
			c, err := grpcConn()
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			kinds = append(kinds, Kind{Name: name, Call: floorCall(healthpb.NewHealthClient(c), withToken)})
		case KindRedis:
			if o.RedisAddr == "" || o.RedisPrefix == "" {
				closeAll()
				return nil, nil, errors.New("loadgen: --redis-addr and --redis-prefix are required for the Redis peer")
			}
			rdb := goredis.NewClient(&goredis.Options{Addr: o.RedisAddr, Password: o.RedisPass, DB: o.RedisDB, PoolSize: o.InFlight})
			closers = append(closers, func() { _ = rdb.Close() })
			kinds = append(kinds, Kind{Name: name, Call: redisCall(rdb, o.RedisPrefix, int64(o.PageSize-1))})
		default:
			closeAll()
			return nil, nil, fmt.Errorf("loadgen: kind %s: want %s, %s or %s", quote.Q(name), KindGetFeed, KindRedis, KindFloor)
		}
	}
	return kinds, closeAll, nil
}

// getFeedCall is the GetFeed kind's call: one page of size pins of the user.
func getFeedCall(feed feedv1.FeedServiceClient, withToken func(context.Context) context.Context, size int32) Call {
	return func(ctx context.Context, user uint64) Outcome {
		resp, err := feed.GetFeed(withToken(ctx), &feedv1.GetFeedRequest{UserId: user, PageSize: size})
		if err != nil {
			return Outcome{Code: status.Code(err).String()}
		}
		return Outcome{Code: CodeOK, Fresh: freshName(resp.GetFreshStatus())}
	}
}

// floorCall is the empty call's: a health check on GetFeed's connection, the transport's floor.
func floorCall(health healthpb.HealthClient, withToken func(context.Context) context.Context) Call {
	return func(ctx context.Context, _ uint64) Outcome {
		if _, err := health.Check(withToken(ctx), &healthpb.HealthCheckRequest{}); err != nil {
			return Outcome{Code: status.Code(err).String()}
		}
		return Outcome{Code: CodeOK}
	}
}

// redisCall is the Redis peer's call: ZREVRANGE 0..stop of the user's sorted set under prefix.
func redisCall(rdb *goredis.Client, prefix string, stop int64) Call {
	return func(ctx context.Context, user uint64) Outcome {
		if err := rdb.ZRangeArgs(ctx, goredis.ZRangeArgs{Key: prefix + strconv.FormatUint(user, 10), Start: 0, Stop: stop, Rev: true}).Err(); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return Outcome{Code: "DeadlineExceeded"}
			}
			return Outcome{Code: "Redis"}
		}
		return Outcome{Code: CodeOK}
	}
}

// freshName is a fresh status without its enum prefix, in lower case ("included").
func freshName(f feedv1.FreshStatus) string {
	return strings.ToLower(strings.TrimPrefix(f.String(), "FRESH_STATUS_"))
}

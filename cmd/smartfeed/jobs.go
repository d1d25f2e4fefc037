package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/quote"
	"github.com/smartfeed/smartfeed/pinlater"
)

const jobsLong = `Operates the pinlater queues (Asynq on Redis) of a deployment.

The connection flags are the servers' (--redis-addr, --redis-db, --redis-namespace; for Sentinel
--redis-mode sentinel, --redis-sentinel-master, --redis-sentinel-addrs; for a Redis Cluster
--redis-mode cluster, --redis-cluster-addrs; with their SMARTFEED_* twins; SMARTFEED_REDIS_PASSWORD
and SMARTFEED_REDIS_SENTINEL_PASSWORD when they want one) and may come anywhere after "jobs"; --redis, --db and --namespace are kept as their old spellings. Queue names are the
logical ones (critical, fanout, default, bulk, ...): jobs adds the namespace prefix ("<ns>-").

  queues                        list queues: sizes, latency, paused, draining, rate, done/failed today
  history QUEUE [--days N]      processed and failed runs per day
  list QUEUE [--state S]        list tasks in a state: pending, active, scheduled, retry, archived, completed
  dead QUEUE [--page N] [--size N]
                                list dead (archived) tasks; "-" for one archived by hand
  inspect QUEUE ID              show one task
  run QUEUE ID                  run a scheduled, retrying or dead task now
  archive QUEUE ID              move a pending, scheduled or retrying task to the dead set
  retry QUEUE ID|--all          move dead task(s) back to the queue
  delete QUEUE ID|--all         delete a task / all dead tasks
  pause QUEUE                   stop every worker taking tasks of QUEUE
  resume QUEUE                  undo pause (and a rate of 0)
  rate QUEUE JOBS_PER_S|none    set the queue's rate limit, live; 0 pauses, none removes it
  drain QUEUE [--wait DURATION] refuse new enqueues while the workers empty QUEUE
  undrain QUEUE                 accept enqueues again`

// jobsConn are the connection flags of every jobs subcommand.
type jobsConn struct {
	addr, ns                               string
	db                                     int
	mode, master, sentinels, cluster, user string
}

// redis is the Redis jobs connects to, its passwords from the environment.
func (jc jobsConn) redis(getenv func(string) string) pinlater.RedisConfig {
	return redisConf(config.Redis{Mode: jc.mode, Addr: jc.addr, DB: jc.db, SentinelMaster: jc.master,
		SentinelAddrs: jc.sentinels, ClusterAddrs: jc.cluster, Username: jc.user,
		Password: getenv(config.EnvPrefix + "REDIS_PASSWORD"), SentinelPassword: getenv(config.EnvPrefix + "REDIS_SENTINEL_PASSWORD")})
}

// bindFlags defines the connection flags on pf (the persistent flags of "jobs"), defaulting to
// the servers' defaults, and hidden aliases under their old spellings (--redis, --db, --namespace).
func (jc *jobsConn) bindFlags(pf *pflag.FlagSet) {
	def := config.DefaultConfig().Redis
	pf.StringVar(&jc.addr, "redis-addr", def.Addr, "pinlater Redis host:port")
	pf.IntVar(&jc.db, "redis-db", def.DB, "pinlater Redis database")
	pf.StringVar(&jc.ns, "redis-namespace", def.Namespace, "prefix of pinlater keys and queues")
	pf.StringVar(&jc.mode, "redis-mode", def.Mode, "shape of the pinlater Redis: single, sentinel or cluster")
	pf.StringVar(&jc.master, "redis-sentinel-master", def.SentinelMaster, "name the sentinels monitor the Redis primary under (--redis-mode sentinel)")
	pf.StringVar(&jc.sentinels, "redis-sentinel-addrs", def.SentinelAddrs, "the sentinels, host:port,... (--redis-mode sentinel)")
	pf.StringVar(&jc.cluster, "redis-cluster-addrs", def.ClusterAddrs, "some nodes of the Redis Cluster, host:port,... (--redis-mode cluster)")
	pf.StringVar(&jc.user, "redis-username", def.Username, "Redis ACL user (empty: the default user)")
	for old, name := range map[string]string{"redis": "redis-addr", "db": "redis-db", "namespace": "redis-namespace"} {
		f := *pf.Lookup(name)
		f.Name, f.Usage, f.Hidden, f.Shorthand = old, "old spelling of --"+name, true, ""
		pf.AddFlag(&f)
	}
}

// newJobsCmd is "smartfeed jobs ...": operations on pinlater queues.
func newJobsCmd(getenv func(string) string) *cobra.Command {
	var jc jobsConn
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "operate pinlater queues: queues, history, list, dead, inspect, run, archive, retry, delete, pause, resume, rate, drain",
		Long:  jobsLong,
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	jc.bindFlags(cmd.PersistentFlags())
	// withAdmin runs fn with an admin of the flags' Redis and namespace.
	withAdmin := func(fn jobsFn) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if jc.db < 0 || jc.db > 1024 {
				return fmt.Errorf("jobs: --redis-db %d out of range", jc.db)
			}
			rc := jc.redis(getenv)
			if err := rc.Validate(); err != nil {
				return fmt.Errorf("jobs: redis: %w", err)
			}
			admin, err := pinlater.NewAdmin(rc.ConnOpt(), pinlater.WithNamespace(jc.ns))
			if err != nil {
				return fmt.Errorf("jobs: %w", err)
			}
			defer admin.Close()
			if err := admin.Ping(cmd.Context()); err != nil {
				return jobsRedisError(err, jc)
			}
			return fn(cmd.Context(), admin, cmd.OutOrStdout(), args)
		}
	}
	sub := func(use, short string, args cobra.PositionalArgs, fn jobsFn) *cobra.Command {
		c := &cobra.Command{Use: use, Short: short, Args: args, RunE: withAdmin(fn)}
		cmd.AddCommand(c)
		return c
	}
	addJobsReadCmds(sub)
	addJobsTaskCmds(sub)
	addJobsQueueCmds(sub)
	return cmd
}

// jobsFn runs one jobs subcommand with an admin of the flags' Redis and namespace.
type jobsFn func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error

// jobsSub adds a jobs subcommand running fn.
type jobsSub func(use, short string, args cobra.PositionalArgs, fn jobsFn) *cobra.Command

// addJobsReadCmds adds the subcommands that read: queues, history, list, dead.
func addJobsReadCmds(sub jobsSub) {
	sub("queues", "list queues: sizes, latency, paused, draining, rate, done and failed today", cobra.NoArgs,
		func(ctx context.Context, admin *pinlater.Admin, out io.Writer, _ []string) error {
			return jobsQueues(ctx, admin, out)
		})
	var days int
	history := sub("history QUEUE", "processed and failed runs of QUEUE per day, today first", cobra.ExactArgs(1),
		func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error {
			return jobsHistory(ctx, admin, args[0], days, out)
		})
	history.Flags().IntVar(&days, "days", 7, "days back (1–90)")
	var state string
	var page, size int
	list := sub("list QUEUE", "list the tasks of QUEUE in one state", cobra.ExactArgs(1),
		func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error {
			ts, err := admin.Tasks(ctx, args[0], state, page, size)
			if err != nil {
				return err
			}
			return printTasks(out, ts)
		})
	list.Flags().StringVar(&state, "state", "pending", "pending, active, scheduled, retry, archived (or dead) or completed")
	pageFlags := func(c *cobra.Command) {
		c.Flags().IntVar(&page, "page", 1, "page, from 1")
		c.Flags().IntVar(&size, "size", 20, "tasks per page (max 1000)")
	}
	pageFlags(list)
	dead := sub("dead QUEUE", "list dead (archived) tasks of QUEUE", cobra.ExactArgs(1),
		func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error {
			return jobsDead(ctx, admin, args[0], page, size, out)
		})
	pageFlags(dead)
}

// addJobsTaskCmds adds the subcommands that act on tasks: inspect, run, archive, retry, delete.
func addJobsTaskCmds(sub jobsSub) {
	sub("inspect QUEUE ID", "show one task", queueIDArgs("inspect"),
		func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error {
			return jobsInspect(ctx, admin, args[0], args[1], out)
		})
	sub("run QUEUE ID", "run a scheduled, retrying or dead task now", queueIDArgs("run"),
		func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error {
			if err := admin.RunTask(ctx, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(out, "queued to run now: %s in %s\n", args[1], args[0])
			return nil
		})
	sub("archive QUEUE ID", "move a pending, scheduled or retrying task to the dead set", queueIDArgs("archive"),
		func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error {
			if err := admin.ArchiveTask(ctx, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(out, "archived: %s in %s\n", args[1], args[0])
			return nil
		})
	for _, verb := range []string{"retry", "delete"} {
		var all bool
		short := "move a dead task (or --all of them) back to its queue"
		if verb == "delete" {
			short = "delete a task that is not running (or --all dead tasks)"
		}
		c := sub(verb+" QUEUE ID|--all", short, cobra.RangeArgs(1, 2),
			func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error {
				return jobsRetryDelete(ctx, admin, verb, all, args, out)
			})
		c.Flags().BoolVar(&all, "all", false, "every dead task of QUEUE (no environment twin: a variable left set must not do this)")
		noEnv(c.Flags(), "all")
	}
}

// addJobsQueueCmds adds the subcommands that act on queues: pause, resume, undrain, rate, drain.
func addJobsQueueCmds(sub jobsSub) {
	for _, verb := range []string{"pause", "resume", "undrain"} {
		short := map[string]string{"pause": "stop every worker taking tasks of QUEUE",
			"resume": "undo pause (and a rate of 0)", "undrain": "accept enqueues of QUEUE again"}[verb]
		sub(verb+" QUEUE", short, oneQueueArg(verb),
			func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error {
				var err error
				switch verb {
				case "pause":
					err = admin.Pause(ctx, args[0])
				case "resume":
					err = admin.Resume(ctx, args[0])
				default:
					err = admin.SetDraining(ctx, args[0], false)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s: %s\n", pastTense(verb), args[0])
				return nil
			})
	}
	sub("rate QUEUE JOBS_PER_S|none", "set the queue's rate limit, live; 0 pauses, none removes it",
		func(_ *cobra.Command, args []string) error {
			if len(args) != 2 || args[0] == "" {
				return errors.New("jobs rate: want QUEUE JOBS_PER_S (or none)")
			}
			return nil
		},
		func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error {
			return jobsRate(ctx, admin, args[0], args[1], out)
		})
	var wait time.Duration
	drain := sub("drain QUEUE", "refuse new enqueues while the workers empty QUEUE", oneQueueArg("drain"),
		func(ctx context.Context, admin *pinlater.Admin, out io.Writer, args []string) error {
			return jobsDrain(ctx, admin, args[0], wait, out)
		})
	drain.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the queue to empty")
}

// queueIDArgs wants QUEUE ID.
func queueIDArgs(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 2 || args[0] == "" || args[1] == "" {
			return fmt.Errorf("jobs %s: want QUEUE ID", name)
		}
		return nil
	}
}

// oneQueueArg wants exactly one queue.
func oneQueueArg(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 || args[0] == "" {
			return fmt.Errorf("jobs %s: want exactly one queue", name)
		}
		return nil
	}
}

func jobsInspect(ctx context.Context, admin *pinlater.Admin, q, id string, out io.Writer) error {
	ts, err := admin.Task(ctx, q, id)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nqueue\t%s\ntype\t%s\nstate\t%s\nattempts\t%d\n", ts.ID, ts.Queue, ts.Type, ts.State, ts.Attempts)
	if ts.LastErr != "" {
		fmt.Fprintf(tw, "last error\t%s\nlast failed\t%s\n", ts.LastErr, failedAt(ts.LastFailedAt))
	}
	if !ts.NextProcessAt.IsZero() {
		fmt.Fprintf(tw, "next run\t%s\n", ts.NextProcessAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "payload\t%s\n", ts.Payload)
	return tw.Flush()
}

func jobsRetryDelete(ctx context.Context, admin *pinlater.Admin, verb string, all bool, args []string, out io.Writer) error {
	var err error
	if all {
		if len(args) != 1 {
			return fmt.Errorf("jobs %s --all: want QUEUE only", verb)
		}
		var n int
		if verb == "retry" {
			n, err = admin.RetryAllDead(ctx, args[0])
		} else {
			n, err = admin.DeleteAllDead(ctx, args[0])
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: %d dead tasks of %s\n", pastTense(verb), n, args[0])
		return nil
	}
	if err := queueIDArgs(verb)(nil, args); err != nil {
		return err
	}
	q, id := args[0], args[1]
	if verb == "retry" {
		err = admin.RetryDead(ctx, q, id)
	} else {
		err = admin.DeleteTask(ctx, q, id)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s in %s\n", pastTense(verb), id, q)
	return nil
}

func jobsRate(ctx context.Context, admin *pinlater.Admin, q, rate string, out io.Writer) error {
	r := -1.0
	if rate != "none" {
		var err error
		r, err = strconv.ParseFloat(rate, 64)
		if err != nil || r < 0 {
			return fmt.Errorf("jobs rate: %q is not a rate (a number >= 0, or none)", rate)
		}
	}
	if err := admin.SetRate(ctx, q, r); err != nil {
		return err
	}
	fmt.Fprintf(out, "rate of %s: %s\n", q, rateString(r))
	return nil
}

func jobsDrain(ctx context.Context, admin *pinlater.Admin, q string, wait time.Duration, out io.Writer) error {
	if err := admin.SetDraining(ctx, q, true); err != nil {
		return err
	}
	fmt.Fprintf(out, "draining: %s (enqueues refused; run 'jobs undrain %s' to lift)\n", q, q)
	if wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		if err := admin.WaitDrained(wctx, q, 200*time.Millisecond); err != nil {
			return err
		}
		fmt.Fprintf(out, "drained: %s\n", q)
	}
	return nil
}

func jobsHistory(ctx context.Context, admin *pinlater.Admin, q string, days int, out io.Writer) error {
	ds, err := admin.History(ctx, q, days)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DATE\tPROCESSED\tFAILED\tSUCCEEDED")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", d.Date.UTC().Format(time.DateOnly), d.Processed, d.Failed, d.Processed-d.Failed)
	}
	return tw.Flush()
}

func printTasks(out io.Writer, ts []pinlater.TaskState) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tSTATE\tATTEMPTS\tNEXT RUN\tLAST ERROR")
	for _, t := range ts {
		next := "-"
		if !t.NextProcessAt.IsZero() {
			next = t.NextProcessAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", t.ID, t.Type, t.State, t.Attempts, next, shorten(t.LastErr))
	}
	return tw.Flush()
}

// shorten cuts an error message for a table.
func shorten(msg string) string {
	if len(msg) > 80 {
		return msg[:77] + "..."
	}
	if msg == "" {
		return "-"
	}
	return msg
}

func pastTense(verb string) string {
	switch verb {
	case "retry":
		return "retried"
	case "delete":
		return "deleted"
	case "pause":
		return "paused"
	case "resume":
		return "resumed"
	case "undrain":
		return "undrained"
	}
	return verb
}

func rateString(r float64) string {
	switch {
	case r < 0:
		return "none"
	case r == 0:
		return "0 (paused)"
	}
	return strconv.FormatFloat(r, 'g', -1, 64) + "/s"
}

func jobsQueues(ctx context.Context, admin *pinlater.Admin, stdout io.Writer) error {
	qs, err := admin.Queues(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tACTIVE\tSCHEDULED\tRETRY\tDEAD\tLATENCY\tSTATE\tRATE\tDONE TODAY\tFAILED TODAY")
	for _, q := range qs {
		var state []string
		if q.Paused {
			state = append(state, "paused")
		}
		if q.Draining {
			state = append(state, "draining")
		}
		if len(state) == 0 {
			state = append(state, "running")
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\n", q.Name, q.Pending, q.Active, q.Scheduled, q.Retry,
			q.Dead, q.Latency.Round(time.Millisecond), strings.Join(state, ","), rateString(q.Rate), q.Processed, q.Failed)
	}
	return tw.Flush()
}

func jobsDead(ctx context.Context, admin *pinlater.Admin, q string, page, size int, out io.Writer) error {
	dead, err := admin.DeadTasks(ctx, q, page, size)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tATTEMPTS\tFAILED AT\tLAST ERROR")
	for _, d := range dead {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.ID, d.Type, d.Attempts, failedAt(d.LastFailedAt), shorten(d.LastErr))
	}
	return tw.Flush()
}

// failedAt formats when a task last failed; a task moved to the dead set by hand never failed.
func failedAt(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// jobsRedisError is the error of a jobs command whose Redis does not answer PING. When nothing
// answers at the address it names the address and database tried and how to change them: the
// commonest cause is jobs run with the default address (127.0.0.1:6379) while the deployment's
// Redis is elsewhere. Any other answer (a password refused) is reported as Redis gave it.
func jobsRedisError(err error, jc jobsConn) error {
	if jc.mode != "" && jc.mode != config.RedisSingle {
		return fmt.Errorf("jobs: the Redis (%s, mode %s): %w", quote.Q(jc.redis(func(string) string { return "" }).String()), quote.Q(jc.mode), err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return fmt.Errorf("jobs: no Redis answers at %s (db %d): %w; point jobs at the deployment's Redis with --redis-addr HOST:PORT "+
			"or SMARTFEED_REDIS_ADDR, or start a local one with `export $(scripts/redis.sh up)`", quote.Q(jc.addr), jc.db, err)
	}
	return fmt.Errorf("jobs: the Redis at %s (db %d; its password from SMARTFEED_REDIS_PASSWORD): %w", quote.Q(jc.addr), jc.db, err)
}

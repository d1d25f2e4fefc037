package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"

	"github.com/smartfeed/smartfeed/pinlater"
)

const jobsUsage = `usage: smartfeed jobs [--redis-addr ADDR] [--redis-db N] [--redis-namespace NS] COMMAND

The connection flags are the servers' (--redis-addr, --redis-db, --redis-namespace, with their
SMARTFEED_* twins); --redis, --db and --namespace are kept as their old spellings.

  queues                        list queues: sizes, latency, paused, draining, rate
  dead QUEUE [--page N] [--size N]
                                list dead (archived) tasks
  inspect QUEUE ID              show one task
  retry QUEUE ID|--all          move dead task(s) back to the queue
  delete QUEUE ID|--all         delete a task / all dead tasks
  pause QUEUE                   stop every worker taking tasks of QUEUE
  resume QUEUE                  undo pause (and a rate of 0)
  rate QUEUE JOBS_PER_S|none    set the queue's rate limit, live; 0 pauses, none removes it
  drain QUEUE [--wait DURATION] refuse new enqueues while the workers empty QUEUE
  undrain QUEUE                 accept enqueues again

--redis defaults to $SMARTFEED_REDIS_ADDR, else 127.0.0.1:6379.`

// runJobs is "smartfeed jobs ...": operations on pinlater queues.
func runJobs(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	defAddr := os.Getenv("SMARTFEED_REDIS_ADDR")
	if defAddr == "" {
		defAddr = "127.0.0.1:6379"
	}
	addr := fs.String("redis-addr", defAddr, "Redis address [$SMARTFEED_REDIS_ADDR]")
	fs.StringVar(addr, "redis", defAddr, "old spelling of --redis-addr")
	defDB, _ := strconv.Atoi(os.Getenv("SMARTFEED_REDIS_DB"))
	db := fs.Int("redis-db", defDB, "Redis database [$SMARTFEED_REDIS_DB]")
	fs.IntVar(db, "db", defDB, "old spelling of --redis-db")
	ns := fs.String("redis-namespace", os.Getenv("SMARTFEED_REDIS_NAMESPACE"), "pinlater namespace [$SMARTFEED_REDIS_NAMESPACE]")
	fs.StringVar(ns, "namespace", *ns, "old spelling of --redis-namespace")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, jobsUsage)
		return nil
	} else if err != nil {
		return fmt.Errorf("jobs: %w\n%s", err, jobsUsage)
	}
	rest := fs.Args()
	if len(rest) == 0 || rest[0] == "help" || wantsHelp(rest[1:]) {
		fmt.Fprintln(stdout, jobsUsage)
		return nil
	}
	if *db < 0 || *db > 1024 {
		return fmt.Errorf("jobs: --db %d out of range", *db)
	}
	admin, err := pinlater.NewAdmin(asynq.RedisClientOpt{Addr: *addr, DB: *db}, pinlater.WithNamespace(*ns))
	if err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	defer admin.Close()
	sub, subArgs := rest[0], rest[1:]
	switch sub {
	case "queues":
		if len(subArgs) != 0 {
			return errors.New("jobs queues: takes no arguments")
		}
		return jobsQueues(ctx, admin, stdout)
	case "dead":
		return jobsDead(ctx, admin, subArgs, stdout)
	case "inspect":
		q, id, err := queueAndID("inspect", subArgs)
		if err != nil {
			return err
		}
		ts, err := admin.Task(ctx, q, id)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "id\t%s\nqueue\t%s\ntype\t%s\nstate\t%s\nattempts\t%d\n", ts.ID, ts.Queue, ts.Type, ts.State, ts.Attempts)
		if ts.LastErr != "" {
			fmt.Fprintf(tw, "last error\t%s\nlast failed\t%s\n", ts.LastErr, failedAt(ts.LastFailedAt))
		}
		if !ts.NextProcessAt.IsZero() {
			fmt.Fprintf(tw, "next run\t%s\n", ts.NextProcessAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(tw, "payload\t%s\n", ts.Payload)
		return tw.Flush()
	case "retry", "delete":
		if len(subArgs) == 2 && subArgs[1] == "--all" {
			var n int
			if sub == "retry" {
				n, err = admin.RetryAllDead(ctx, subArgs[0])
			} else {
				n, err = admin.DeleteAllDead(ctx, subArgs[0])
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: %d dead tasks of %s\n", pastTense(sub), n, subArgs[0])
			return nil
		}
		q, id, err := queueAndID(sub, subArgs)
		if err != nil {
			return err
		}
		if sub == "retry" {
			err = admin.RetryDead(ctx, q, id)
		} else {
			err = admin.DeleteTask(ctx, q, id)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %s in %s\n", pastTense(sub), id, q)
		return nil
	case "pause", "resume", "undrain":
		if len(subArgs) != 1 || subArgs[0] == "" {
			return fmt.Errorf("jobs %s: want exactly one queue", sub)
		}
		q := subArgs[0]
		switch sub {
		case "pause":
			err = admin.Pause(ctx, q)
		case "resume":
			err = admin.Resume(ctx, q)
		default:
			err = admin.SetDraining(ctx, q, false)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %s\n", pastTense(sub), q)
		return nil
	case "rate":
		if len(subArgs) != 2 || subArgs[0] == "" {
			return errors.New("jobs rate: want QUEUE JOBS_PER_S (or none)")
		}
		r := -1.0
		if subArgs[1] != "none" {
			r, err = strconv.ParseFloat(subArgs[1], 64)
			if err != nil || r < 0 {
				return fmt.Errorf("jobs rate: %q is not a rate (a number >= 0, or none)", subArgs[1])
			}
		}
		if err := admin.SetRate(ctx, subArgs[0], r); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rate of %s: %s\n", subArgs[0], rateString(r))
		return nil
	case "drain":
		dfs := flag.NewFlagSet("jobs drain", flag.ContinueOnError)
		dfs.SetOutput(io.Discard)
		wait := dfs.Duration("wait", 0, "wait up to this long for the queue to empty")
		q, err := oneQueue(dfs, "drain", subArgs)
		if err != nil {
			return err
		}
		if err := admin.SetDraining(ctx, q, true); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "draining: %s (enqueues refused; run 'jobs undrain %s' to lift)\n", q, q)
		if *wait > 0 {
			wctx, cancel := context.WithTimeout(ctx, *wait)
			defer cancel()
			if err := admin.WaitDrained(wctx, q, 200*time.Millisecond); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "drained: %s\n", q)
		}
		return nil
	}
	return fmt.Errorf("jobs: unknown command %q\n%s", sub, jobsUsage)
}

// oneQueue parses flags around a single queue argument.
func oneQueue(fs *flag.FlagSet, name string, args []string) (string, error) {
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return "", fmt.Errorf("jobs %s: %w", name, err)
		}
		args = fs.Args()
		if len(args) > 0 {
			pos = append(pos, args[0])
			args = args[1:]
		}
	}
	if len(pos) != 1 || pos[0] == "" {
		return "", fmt.Errorf("jobs %s: want exactly one queue", name)
	}
	return pos[0], nil
}

func queueAndID(name string, args []string) (string, string, error) {
	if len(args) != 2 || args[0] == "" || args[1] == "" {
		return "", "", fmt.Errorf("jobs %s: want QUEUE ID", name)
	}
	return args[0], args[1], nil
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

func jobsDead(ctx context.Context, admin *pinlater.Admin, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("jobs dead", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	page := fs.Int("page", 1, "page, from 1")
	size := fs.Int("size", 20, "tasks per page (max 1000)")
	q, err := oneQueue(fs, "dead", args)
	if err != nil {
		return err
	}
	dead, err := admin.DeadTasks(ctx, q, *page, *size)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tATTEMPTS\tFAILED AT\tLAST ERROR")
	for _, d := range dead {
		msg := d.LastErr
		if len(msg) > 80 {
			msg = msg[:77] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.ID, d.Type, d.Attempts, failedAt(d.LastFailedAt), msg)
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

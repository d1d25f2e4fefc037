// Command hbasewait blocks until a freshly started HBase serves reads and writes, or fails after a
// timeout. scripts/hbase.sh runs it after launching the standalone HMaster.
//
// Readiness means, in order: the master answers ListTableNames (it throws PleaseHoldException /
// ServerNotRunningYetException while it initialises), a probe table can be created, a row can be
// put and read back, and the probe table can be dropped again.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/tsuna/gohbase"
	"github.com/tsuna/gohbase/hrpc"
)

func main() {
	zk := flag.String("zk", "127.0.0.1:2181", "ZooKeeper quorum of the HBase to wait for")
	timeout := flag.Duration("timeout", 180*time.Second, "give up after this long")
	pid := flag.Int("pid", 0, "fail at once when this process exits (the HBase JVM)")
	flag.Parse()
	logrus.SetLevel(logrus.FatalLevel) // gohbase logs every retry; we report progress ourselves

	start := time.Now()
	deadline := start.Add(*timeout)
	if err := wait(*zk, deadline, *pid); err != nil {
		fmt.Fprintf(os.Stderr, "hbasewait: %v (after %s)\n", err, time.Since(start).Round(time.Second))
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "hbasewait: HBase at %s is ready after %s\n", *zk, time.Since(start).Round(100*time.Millisecond))
	fmt.Printf("SMARTFEED_HBASE_ZK=%s\n", *zk)
}

func wait(zk string, deadline time.Time, pid int) error {
	adm := gohbase.NewAdminClient(zk)
	step := func(name string, f func(ctx context.Context) error) error {
		var last error
		for attempt := 1; ; attempt++ {
			if pid > 0 && !alive(pid) {
				return fmt.Errorf("HBase process %d exited during %s (last error: %v)", pid, name, last)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("timed out during %s: %v", name, last)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			last = f(ctx)
			cancel()
			if last == nil {
				return nil
			}
			if attempt == 1 || attempt%10 == 0 {
				fmt.Fprintf(os.Stderr, "hbasewait: %s not ready yet: %s\n", name, firstLine(last))
			}
			time.Sleep(time.Second)
		}
	}

	if err := step("ListTableNames", func(ctx context.Context) error {
		req, err := hrpc.NewListTableNames(ctx)
		if err != nil {
			return err
		}
		_, err = adm.ListTableNames(req)
		return err
	}); err != nil {
		return err
	}

	table := []byte("hbasewait_probe_" + strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := step("CreateTable", func(ctx context.Context) error {
		err := adm.CreateTable(hrpc.NewCreateTable(ctx, table, map[string]map[string]string{"f": nil}))
		if err != nil && bytes.Contains([]byte(err.Error()), []byte("TableExistsException")) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}

	cl := gohbase.NewClient(zk, gohbase.FlushInterval(time.Millisecond))
	defer cl.Close()
	if err := step("Put/Get", func(ctx context.Context) error {
		put, err := hrpc.NewPut(ctx, table, []byte("r"), map[string]map[string][]byte{"f": {"q": []byte("v")}})
		if err != nil {
			return err
		}
		if _, err := cl.Put(put); err != nil {
			return err
		}
		get, err := hrpc.NewGet(ctx, table, []byte("r"))
		if err != nil {
			return err
		}
		res, err := cl.Get(get)
		if err != nil {
			return err
		}
		if len(res.Cells) != 1 || string(res.Cells[0].Value) != "v" {
			return errors.New("probe row read back wrong")
		}
		return nil
	}); err != nil {
		return err
	}

	// Best effort, one try each: the data dir is wiped on every start anyway.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := adm.DisableTable(hrpc.NewDisableTable(ctx, table)); err == nil {
		_ = adm.DeleteTable(hrpc.NewDeleteTable(ctx, table))
	}
	return nil
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err != nil || !bytes.Contains(b, []byte(") Z "))
}

func firstLine(err error) string {
	s := err.Error()
	if i := bytes.IndexByte([]byte(s), '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

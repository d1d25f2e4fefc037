package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Args are o as `smartfeed loadgen`'s flags (the Redis password is left to the environment,
// SMARTFEED_REDIS_PASSWORD, out of the process list).
func (o Options) Args() []string {
	floats := func(fs []float64) string {
		s := make([]string, len(fs))
		for i, f := range fs {
			s[i] = strconv.FormatFloat(f, 'g', -1, 64)
		}
		return strings.Join(s, ",")
	}
	a := []string{
		"--grpc-addr=" + o.GRPCAddr, "--redis-addr=" + o.RedisAddr, "--redis-db=" + strconv.Itoa(o.RedisDB),
		"--redis-prefix=" + o.RedisPrefix, "--users-file=" + o.UsersFile, "--kinds=" + strings.Join(o.Kinds, ","),
		"--rates=" + floats(o.Rates), "--report-rates=" + floats(o.ReportRates), "--window=" + o.Window.String(),
		"--overrun=" + o.Overrun.String(), "--rounds=" + strconv.Itoa(o.Rounds), "--in-flight=" + strconv.Itoa(o.InFlight),
		"--call-timeout=" + o.CallTimeout.String(), "--p99-bound=" + o.Bound.String(), "--page-size=" + strconv.Itoa(o.PageSize),
		"--zipf-s=" + strconv.FormatFloat(o.ZipfS, 'g', -1, 64), "--seed=" + strconv.FormatUint(o.Seed, 10),
		"--metrics-url=" + o.MetricsURL, "--idle-counters=" + strings.Join(o.IdleCounters, ","),
		"--idle-quiet=" + o.IdleQuiet.String(), "--idle-max=" + o.IdleMax.String(), "--gomaxprocs=" + strconv.Itoa(o.GOMAXPROCS),
	}
	if len(o.IdleGauges) > 0 {
		a = append(a, "--idle-gauges="+strings.Join(o.IdleGauges, ","))
	}
	if o.TokenFile != "" {
		a = append(a, "--token-file="+o.TokenFile)
	}
	if o.CPUs != "" {
		a = append(a, "--cpus="+o.CPUs)
	}
	return a
}

// Exec runs `exe loadgen` (exe: the smartfeed binary) with o in a process of its own, over
// users (written to dir/loadgen-users.txt), its window lines to log and its JSON lines to
// dir/loadgen.jsonl, and reads its report.
func Exec(ctx context.Context, exe string, o Options, users []uint64, dir string, log io.Writer) (*Report, error) {
	if len(users) == 0 {
		return nil, errors.New("loadgen: no users")
	}
	var b strings.Builder
	for _, u := range users {
		b.WriteString(strconv.FormatUint(u, 10))
		b.WriteByte('\n')
	}
	o.UsersFile = filepath.Join(dir, "loadgen-users.txt")
	if err := os.WriteFile(o.UsersFile, []byte(b.String()), 0o644); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	outPath := filepath.Join(dir, "loadgen.jsonl")
	out, err := os.Create(outPath)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, exe, append([]string{"loadgen"}, o.Args()...)...)
	cmd.Stdout, cmd.Stderr = out, log
	cmd.Env = os.Environ()
	if o.RedisPass != "" {
		cmd.Env = append(cmd.Env, "SMARTFEED_REDIS_PASSWORD="+o.RedisPass)
	}
	cmd.WaitDelay = 10 * time.Second
	runErr := cmd.Run()
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		return nil, errors.Join(runErr, err)
	}
	rep, err := ReadReport(out)
	if runErr != nil {
		return rep, fmt.Errorf("loadgen: %s: %w", exe, runErr)
	}
	return rep, err
}

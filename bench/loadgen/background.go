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

// Running is a load generator started by Start.
type Running struct {
	cmd  *exec.Cmd
	out  *os.File
	done chan error
}

// Start runs `exe loadgen` with o in a process of its own, as Exec does, over users (written to
// dir/NAME-users.txt; its JSON lines to dir/NAME.jsonl, its window lines to log), and returns
// at once; Stop ends it. It is for load that runs beside another measurement for as long as
// that takes: give o a window longer than the measurement.
func Start(ctx context.Context, exe string, o Options, users []uint64, dir, name string, log io.Writer) (*Running, error) {
	if len(users) == 0 {
		return nil, errors.New("loadgen: no users")
	}
	var b strings.Builder
	for _, u := range users {
		b.WriteString(strconv.FormatUint(u, 10))
		b.WriteByte('\n')
	}
	o.UsersFile = filepath.Join(dir, name+"-users.txt")
	if err := os.WriteFile(o.UsersFile, []byte(b.String()), 0o644); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	out, err := os.Create(filepath.Join(dir, name+".jsonl"))
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"loadgen"}, o.Args()...)...)
	cmd.Stdout, cmd.Stderr = out, log
	cmd.Env = os.Environ()
	if o.RedisPass != "" {
		cmd.Env = append(cmd.Env, "SMARTFEED_REDIS_PASSWORD="+o.RedisPass)
	}
	// Cancelled, the generator is interrupted as Stop does, and killed if it has not ended
	// 10 s later.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("loadgen: %s: %w", exe, err)
	}
	r := &Running{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { r.done <- cmd.Wait() }()
	return r, nil
}

// Stop interrupts the generator (it ends the window in progress and writes its summary), waits
// for it and returns its report. The exit the interrupt causes is not an error: the report
// says whether the generator finished its window; a generator that had already exited
// returns its own exit status.
func (r *Running) Stop() (*Report, error) {
	defer r.out.Close()
	sigErr := r.cmd.Process.Signal(os.Interrupt)
	runErr := <-r.done
	if sigErr == nil {
		runErr = nil // it was running: its exit is the interrupt's
	}
	if _, err := r.out.Seek(0, io.SeekStart); err != nil {
		return nil, errors.Join(runErr, err)
	}
	rep, err := ReadReport(r.out)
	if runErr != nil {
		return rep, fmt.Errorf("loadgen: %w", runErr)
	}
	return rep, err
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The documents whose commands TestDocsCommandsRun runs, in this order (a later one uses the
// bin/smartfeed an earlier one built).
var runDocs = []string{"README.md", "docs/new-user.md", "docs/operations.md"}

// docBlock is one fenced block of a document.
type docBlock struct {
	doc, lang, noRun string
	line             int
	body             []string
}

var noRunRe = regexp.MustCompile(`^<!-- no-run: (.+) -->$`)

// docBlocks reads the fenced blocks of a Markdown file, with the no-run marker (an HTML comment
// `<!-- no-run: reason -->` on the line before the fence) of each.
func docBlocks(t *testing.T, root, doc string) []docBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	var cur *docBlock
	prev := ""
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &docBlock{doc: doc, lang: strings.TrimPrefix(l, "```"), line: i + 1}
			if m := noRunRe.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
				cur.noRun = m[1]
			}
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body = append(cur.body, l)
		}
		prev = l
	}
	return out
}

// TestDocsCommandsMarked: every fenced block of the documents says what it is: commands that
// run (sh, console, js), or something else (text, json), or commands with a no-run marker that
// says why a test cannot run them. A block of commands left bare would escape the doc test.
func TestDocsCommandsMarked(t *testing.T) {
	for _, doc := range runDocs {
		for _, b := range docBlocks(t, "../..", doc) {
			switch b.lang {
			case "sh", "console", "js":
			case "text", "json":
				if b.noRun != "" {
					t.Errorf("%s:%d: a %s block with a no-run marker: it runs nothing anyway", b.doc, b.line, b.lang)
				}
				// "make test: FAILED: …" is output (make test's summary), "make test" a command.
				for _, l := range b.body {
					if regexp.MustCompile(`^\s*(\$ |bin/smartfeed |smartfeed |go -C charts tool grpcurl|make [A-Za-z_-]+(\s|$))`).MatchString(l) {
						t.Errorf("%s:%d: a %s block holds a command (%q): mark it sh, or no-run with a reason", b.doc, b.line, b.lang, l)
					}
				}
			default:
				t.Errorf("%s:%d: a block without a kind (%q): mark it sh, console, js, text or json", b.doc, b.line, b.lang)
			}
		}
	}
}

// docSession is a shell session in which a document's commands run one by one: its
// environment and directory carry over from a command to the next, as in a terminal.
type docSession struct {
	t       *testing.T
	env     map[string]string
	dir     string
	ports   map[string]string // the documents' default address → this test's
	ph      map[string]string // <placeholder> → value, and a transcript's ID → this run's
	server  *exec.Cmd
	srvDone chan struct{} // closed when the server has exited
	srvLog  string
	prevRC  int
	sandbox func(dir string) // makes a sandbox (the stand-in for a clone) at dir
}

// rewrite puts this test's addresses and the known placeholders and IDs into a command.
func (s *docSession) rewrite(cmd string) string {
	for from, to := range s.ports {
		cmd = strings.ReplaceAll(cmd, from, to)
	}
	for from, to := range s.ph {
		cmd = strings.ReplaceAll(cmd, from, to)
	}
	return cmd
}

func (s *docSession) environ() []string {
	var out []string
	for k, v := range s.env {
		out = append(out, k+"="+v)
	}
	return out
}

// run runs one command in the session and returns its output and exit status.
func (s *docSession) run(cmd string) (string, int) {
	s.t.Helper()
	if f := strings.Fields(cmd); len(f) >= 2 && (f[0] == "bin/smartfeed" || f[0] == "smartfeed") && f[1] == "all" {
		return s.startServer(cmd)
	}
	if m := regexp.MustCompile(`^git clone <the repository> (\S+)$`).FindStringSubmatch(cmd); m != nil {
		// The clone is a stand-in: the working tree as it is, uncommitted changes included.
		s.sandbox(filepath.Join(s.dir, m[1]))
		return "", 0
	}
	state := filepath.Join(s.t.TempDir(), "state")
	script := fmt.Sprintf("set -a\n(exit %d)\n%s\n__rc=$?\n{ pwd; env -0; } > %q\nexit $__rc\n", s.prevRC, cmd, state)
	c := exec.Command("bash", "-c", script)
	c.Dir, c.Env = s.dir, s.environ()
	out, err := c.CombinedOutput()
	rc := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		rc = ee.ExitCode()
	} else if err != nil {
		s.t.Fatalf("%s: %v", cmd, err)
	}
	if b, err := os.ReadFile(state); err == nil {
		dir, env, _ := strings.Cut(string(b), "\n")
		s.dir = dir
		s.env = map[string]string{}
		for _, kv := range strings.Split(env, "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok && !strings.HasPrefix(k, "BASH_FUNC_") && k != "_" && k != "SHLVL" && k != "PWD" && k != "OLDPWD" {
				s.env[k] = v
			}
		}
	}
	s.prevRC = rc
	return string(out), rc
}

// startServer starts `smartfeed all` in the background, as a second terminal would hold it,
// and waits until it is ready or has exited. A server already running (an earlier block's) is
// stopped first, as Ctrl-C in its terminal would.
func (s *docSession) startServer(cmd string) (string, int) {
	s.t.Helper()
	s.stopServer()
	s.srvLog = filepath.Join(s.t.TempDir(), "server.log")
	f, err := os.Create(s.srvLog)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	c := exec.Command("bash", "-c", "exec "+cmd)
	c.Dir, c.Env, c.Stdout, c.Stderr = s.dir, s.environ(), f, f
	if err := c.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = c.Wait()
		close(done)
	}()
	s.t.Cleanup(func() { stopProcess(c, done) })
	ready := "http://" + s.ports["127.0.0.1:9091"] + "/readyz"
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
		select {
		case <-done:
			b, _ := os.ReadFile(s.srvLog)
			s.prevRC = c.ProcessState.ExitCode()
			return string(b), s.prevRC
		case <-time.After(100 * time.Millisecond): // polling readiness, a condition
		}
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.server, s.srvDone, s.prevRC = c, done, 0
				return "", 0
			}
		}
	}
	b, _ := os.ReadFile(s.srvLog)
	s.t.Fatalf("%s: not ready in 3 minutes:\n%s", cmd, b)
	return "", 1
}

// stopServer stops the session's server, as Ctrl-C in its terminal would.
func (s *docSession) stopServer() {
	if s.server != nil {
		stopProcess(s.server, s.srvDone)
	}
	s.server, s.srvDone = nil, nil
}

// stopProcess sends SIGINT to c and waits for it to exit (done), killing it after a minute.
func stopProcess(c *exec.Cmd, done chan struct{}) {
	select {
	case <-done:
		return
	default:
	}
	_ = c.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = c.Process.Kill()
		<-done
	}
}

// learn records the placeholders an answer fills: <username> from CreateUser, <board> from
// CreateBoard, <pin> from CreatePin; and, when the document shows the answer it got (a
// transcript), its IDs → this run's.
func (s *docSession) learn(cmd, out string, shown []string) {
	var got struct {
		IDStr    string `json:"idStr"`
		Username string `json:"username"`
	}
	if json.Unmarshal([]byte(out), &got) != nil || got.IDStr == "" {
		return
	}
	switch {
	case strings.HasSuffix(cmd, "/CreateUser"):
		s.ph["<"+got.Username+">"] = got.IDStr
		s.ph["<id>"] = got.IDStr
	case strings.HasSuffix(cmd, "/CreateBoard"):
		s.ph["<board>"] = got.IDStr
	case strings.HasSuffix(cmd, "/CreatePin"):
		s.ph["<pin>"] = got.IDStr
	}
	var was struct {
		IDStr string `json:"idStr"`
	}
	if json.Unmarshal([]byte(strings.Join(shown, "\n")), &was) == nil && was.IDStr != "" {
		s.ph[was.IDStr] = got.IDStr
	}
}

// runBlock runs the commands of one block; it returns how many it ran.
func (s *docSession) runBlock(b docBlock) int {
	s.t.Helper()
	type step struct {
		cmd   string
		shown []string // the output the document shows (console blocks)
	}
	var steps []step
	switch b.lang {
	case "sh":
		for _, l := range b.body {
			if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
				continue
			}
			// A synopsis's optional flags, [--flag value], are given.
			l = regexp.MustCompile(`\[(--[^\]]*)\]`).ReplaceAllString(l, "$1")
			steps = append(steps, step{cmd: l})
		}
	case "console":
		for _, l := range b.body {
			if c, ok := strings.CutPrefix(l, "$ "); ok {
				steps = append(steps, step{cmd: c})
			} else if len(steps) > 0 {
				steps[len(steps)-1].shown = append(steps[len(steps)-1].shown, l)
			}
		}
	case "js":
		// As a page's module script would: top-level await, fetch.
		js := filepath.Join(s.t.TempDir(), "example.mjs")
		if err := os.WriteFile(js, []byte(s.rewrite(strings.Join(b.body, "\n"))), 0o644); err != nil {
			s.t.Fatal(err)
		}
		steps = append(steps, step{cmd: "node " + js})
	}
	for i, st := range steps {
		cmd := s.rewrite(st.cmd)
		if strings.Contains(regexp.MustCompile(`'[^']*'`).ReplaceAllString(cmd, ""), "<") && regexp.MustCompile(`<[a-z]+>`).MatchString(cmd) {
			s.t.Errorf("%s:%d: unfilled placeholder in %s", b.doc, b.line, cmd)
			continue
		}
		out, rc := s.run(cmd)
		s.t.Logf("%s:%d: $ %s  → exit %d", b.doc, b.line, cmd, rc)
		s.learn(cmd, out, st.shown)
		// A transcript that shows the exit status of a command ("exit status 1") checks it.
		if i+1 < len(steps) && strings.HasPrefix(steps[i+1].cmd, `echo "exit status $?"`) {
			continue
		}
		if strings.HasPrefix(st.cmd, `echo "exit status $?"`) {
			if want := strings.Join(st.shown, "\n"); strings.TrimSpace(out) != want {
				s.t.Errorf("%s:%d: the document shows %q, the run printed %q", b.doc, b.line, want, strings.TrimSpace(out))
			}
			continue
		}
		if rc != 0 {
			s.t.Errorf("%s:%d: %s\nexit status %d:\n%s", b.doc, b.line, cmd, rc, out)
		}
	}
	return len(steps)
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestDocsCommandsRun runs every command of README.md, docs/new-user.md and
// docs/operations.md as written, against a real server, so a command that fails as written
// fails here. Each document runs as one terminal session in a sandbox that stands for a fresh
// clone (links to the working tree, with its own bin/, run/ and data/): `make build` builds
// there, `scripts/redis.sh up` starts a Redis under its run/, `bin/smartfeed all` starts in the
// background until it is ready. What the test changes, and only that: the documents' default
// addresses (127.0.0.1:9090, :9091, :9092) become free ports, through the flags' environment
// twins and in the commands; placeholders (<ada>, <board>, <id>) and a transcript's IDs are
// filled from the answers before them; `git clone <the repository> DIR` makes another sandbox;
// the go command builds with -trimpath (GOFLAGS), so that a sandbox's build uses the build cache.
// Blocks marked no-run are counted, not run.
func TestDocsCommandsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and grpcurl, and starts Redis and the server")
	}
	t.Parallel() // it mostly waits on timers and processes: it runs beside another such test
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	sandbox := func(dir string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			switch e.Name() {
			case "bin", "run", "data", ".git":
				continue
			}
			if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			if _, err := os.Stat(filepath.Join(dir, "run", "redis")); err == nil {
				c := exec.Command("scripts/redis.sh", "down")
				c.Dir = dir
				_ = c.Run()
			}
		})
	}
	main := filepath.Join(work, "smartfeed")
	sandbox(main)
	ports := map[string]string{"127.0.0.1:9090": freeAddr(t), "127.0.0.1:9091": freeAddr(t), "127.0.0.1:9092": freeAddr(t)}
	base := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && !strings.HasPrefix(k, "SMARTFEED_") {
			base[k] = v
		}
	}
	base["SMARTFEED_GRPC_ADDR"] = ports["127.0.0.1:9090"]
	base["SMARTFEED_ADMIN_ADDR"] = ports["127.0.0.1:9091"]
	base["SMARTFEED_ADMIN_GRPC_ADDR"] = ports["127.0.0.1:9092"]
	// A Redis at the default address (another user's) must not answer the "forgot Redis" step.
	base["SMARTFEED_REDIS_ADDR"] = freeAddr(t)
	base["PATH"] = filepath.Join(main, "bin") + ":" + base["PATH"]
	// The sandboxes are new directories in every run, and without -trimpath the go command keys
	// its build cache on a package's directory: each `make build` compiled the module's packages
	// anew (minutes of CPU under make test). With it, the sandboxes' builds and every run's share
	// the cache; the binary differs only in the file names of its debug information.
	base["GOFLAGS"] = strings.TrimSpace(base["GOFLAGS"] + " -trimpath")

	var ran, skipped, blocks int
	for _, doc := range runDocs {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		env["SMARTFEED_DATA_DIR"] = filepath.Join(work, "data-"+filepath.Base(doc))
		if doc == "docs/operations.md" {
			// The README's deployment, carried on: its data and the Redis namespace it owns.
			env["SMARTFEED_DATA_DIR"] = filepath.Join(work, "data-README.md")
		}
		s := &docSession{t: t, env: env, dir: main, ports: ports, ph: map[string]string{}, sandbox: sandbox}
		if doc == "docs/new-user.md" {
			s.dir = filepath.Join(work, "new-user") // it starts with the clone
			if err := os.Mkdir(s.dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if doc == "docs/operations.md" {
			// The page assumes a running process with fault injection (as the demo has): the
			// Redis the README started, and `all --feed-faults`.
			out, rc := s.run("export $(scripts/redis.sh up 2>/dev/null)")
			if rc != 0 {
				t.Fatalf("redis: %s", out)
			}
			if out, rc := s.run("bin/smartfeed all --feed-faults"); rc != 0 {
				t.Fatalf("all --feed-faults: %s", out)
			}
			out, _ = s.run(`go -C charts tool grpcurl -plaintext -d '{"username":"operator","email":"op@example.com"}' ` + ports["127.0.0.1:9090"] + ` smartfeed.graph.v1.GraphService/CreateUser`)
			s.learn("/CreateUser", out, nil)
		}
		for _, b := range docBlocks(t, root, doc) {
			switch {
			case b.lang != "sh" && b.lang != "console" && b.lang != "js":
				continue
			case b.noRun != "":
				skipped++
				t.Logf("%s:%d: not run: %s", b.doc, b.line, b.noRun)
				continue
			}
			blocks++
			ran += s.runBlock(b)
		}
		s.stopServer()
	}
	t.Logf("ran %d commands in %d blocks; %d blocks marked no-run", ran, blocks, skipped)
	if ran < 30 {
		t.Errorf("only %d commands ran", ran)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/smartfeed/smartfeed/internal/testenv"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
)

// updateScreenshotsEnv set to 1 makes TestConsoleInBrowser rewrite docs/console/*.png.
const updateScreenshotsEnv = "SMARTFEED_UPDATE_SCREENSHOTS"

// lockedBuffer is a bytes.Buffer the demo writes to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestConsoleInBrowser runs the demo (with an admin credential) and drives the web console in
// headless Chromium: the feed scrolled to page 3 with no pin twice, a refresh, a pin's
// explanation; the failover page refusing FeedAdmin without the credential, then stopping the
// primary and showing the standby serving (and the feed page still answering), and a knob
// changed there that `smartfeed hedge show` then reports; the queues page pausing a queue.
// With SMARTFEED_UPDATE_SCREENSHOTS=1 it rewrites docs/console/{feed,failover,queues}.png.
func TestConsoleInBrowser(t *testing.T) {
	chrome := testenv.Chromium(t)
	redis, ns := testenv.RedisNamespace(t, "consoletest")
	dir := t.TempDir()
	const token = "console-browser-test-admin-token"
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	demoCtx, stopDemo := context.WithCancel(t.Context())
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(demoCtx, []string{"demo", "--data-dir", filepath.Join(dir, "data"), "--redis-addr", redis,
			"--redis-namespace", ns,
			"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--admin-grpc-addr", "127.0.0.1:0",
			"--admin-token-file", tokenFile, "--demo-users", "80", "--demo-follows", "12",
			"--demo-events-per-sec", "40", "--demo-reads-per-sec", "40"}, out, io.Discard)
	}()
	t.Cleanup(func() {
		stopDemo()
		if err := <-done; err != nil {
			t.Errorf("demo: %v\n%s", err, out.String())
		}
	})
	consoleRe := regexp.MustCompile(`console: (http://(\S+)/console/)#feed\?user=(\d+)`)
	hedgeRe := regexp.MustCompile(`--admin-grpc-addr (\S+) --admin-addr (\S+)`)
	var base, user, adminGRPC, adminHTTP string
	waitFor(t, 60*time.Second, "the demo's console line", func() bool {
		m, h := consoleRe.FindStringSubmatch(out.String()), hedgeRe.FindStringSubmatch(out.String())
		if m == nil || h == nil {
			return false
		}
		base, user, adminGRPC, adminHTTP = m[1], m[3], h[1], h[2]
		return true
	})
	// The feed test scrolls to page 3 of 10 pins: wait until the showcase user's feed holds 30.
	// A first page of 30 reads what a first page of 10 would, and its pins stay in the feed.
	waitFor(t, 120*time.Second, "30 pins in the showcase user's feed", func() bool {
		return feedPins(t, base, user, 30) >= 30
	})

	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), browserOptions(t, chrome, chromedp.WindowSize(1280, 1000))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium %s: %v", chrome, err)
	}
	browse := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v\ndemo output:\n%s", name, err, out.String())
		}
	}
	js := func(expr string) chromedp.Action[chromedp.Void] { return chromedp.Evaluate[chromedp.Void](expr) }
	pins := func() []string {
		t.Helper()
		return evalJS[[]string](t, bctx, `[...document.querySelectorAll('#feed-grid .pin')].map(e => e.dataset.pin)`)
	}
	// text is an element's text, hidden or not ("" when there is no such element).
	text := func(sel string) string {
		t.Helper()
		return evalJS[string](t, bctx, fmt.Sprintf(`(document.querySelector(%q) || {textContent: ''}).textContent.trim()`, sel))
	}
	// page switches the console's page (the hash), without reloading it.
	page := func(hash string) chromedp.Action[chromedp.Void] { return js(fmt.Sprintf(`location.hash = %q`, hash)) }
	shot := func(name string, full bool) {
		t.Helper()
		if os.Getenv(updateScreenshotsEnv) != "1" {
			return
		}
		ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		browse("scroll to the top", js(`window.scrollTo(0, 0)`))
		capture := chromedp.CaptureScreenshot() // the window: the feed goes on below
		if full {
			capture = chromedp.FullScreenshot(100)
		}
		png, err := chromedp.Run(ctx, capture)
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join("..", "..", "docs", "console", name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}

	t.Run("feed: scroll to page 3 with no repeats, refresh, explain", func(t *testing.T) {
		browse("open the feed", chromedp.Navigate(base+"#feed?user="+user),
			chromedp.WaitVisible(chromedp.CSS("#feed-grid .pin")),
			chromedp.SetValue(chromedp.CSS("#feed-size"), "10"),
			chromedp.Click(chromedp.CSS("#feed-load")))
		waitFor(t, browserWait, "page 1 at size 10", func() bool { return text("#feed-pages") == "1" })
		waitFor(t, 60*time.Second, "page 3 by scrolling", func() bool {
			browse("scroll", js(`window.scrollTo(0, document.body.scrollHeight)`))
			n, _ := strconv.Atoi(text("#feed-pages"))
			return n >= 3 || strings.Contains(text("#feed-end"), "end of the feed")
		})
		if n, _ := strconv.Atoi(text("#feed-pages")); n < 3 {
			t.Fatalf("the feed ended after %d pages (%s pins): too short to reach page 3", n, text("#feed-count"))
		}
		shown := pins()
		seen := map[string]bool{}
		for _, p := range shown {
			if seen[p] {
				t.Errorf("pin %s shown twice", p)
			}
			seen[p] = true
		}
		if r := text("#feed-repeats"); r != "0" {
			t.Errorf("the server returned %s pins again across pages, want 0", r)
		}
		if len(shown) < 21 {
			t.Errorf("%d pins after 3 pages of 10, want more than 20", len(shown))
		}
		if e := text("#feed-error"); e != "" {
			t.Errorf("feed error: %s", e)
		}
		// A refresh puts what is new on top, under a marker; the last page the scrolling asked
		// for is in first, so that the two do not add the same pin each.
		waitFor(t, browserWait, "the scrolled pages loaded", func() bool {
			return evalJS[bool](t, bctx, `!feed.loading && (feed.done || !visible(document.getElementById('feed-end')))`)
		})
		browse("refresh", chromedp.Click(chromedp.CSS("#feed-refresh")),
			chromedp.WaitVisible(chromedp.CSS("#feed-grid > .chunk-sep:first-child")))
		clear(seen)
		for _, p := range pins() {
			if seen[p] {
				t.Errorf("pin %s shown twice after the refresh", p)
			}
			seen[p] = true
		}
		browse("explain a pin", js(`window.scrollTo(0, 0)`),
			chromedp.Click(chromedp.CSS("#feed-grid .pin")),
			chromedp.WaitVisible(chromedp.CSS("#feed-explain")))
		if ex := text("#feed-explain"); !strings.Contains(ex, "generator reason") {
			t.Errorf("explanation = %q, want the generator's reason", ex)
		}
		// The generator's view now (PreviewChunk): a row per source with its rate and quota.
		waitFor(t, browserWait, "the generator's rates and deferrals", func() bool {
			return evalJS[int](t, bctx, `document.querySelectorAll('#feed-gen-now tr[data-source]').length`) >= 3
		})
		if now := text("#feed-gen-now"); !strings.Contains(now, "following") || !strings.Contains(now, "Nothing is taken") ||
			!strings.Contains(now, "deferred") {
			t.Errorf("generator explanation = %q, want each source's rate, quota and deferrals", now)
		}
		shot("feed", false)
	})

	t.Run("failover: the credential, a knob seen by hedge show, the primary stopped", func(t *testing.T) {
		browse("open failover without the credential", page("#failover"),
			chromedp.WaitVisible(chromedp.CSS("#fo-error")))
		waitFor(t, browserWait, "FeedAdmin refused without the credential", func() bool {
			return strings.Contains(text("#fo-error"), "unauthenticated")
		})
		browse("enter the admin credential", chromedp.Click(chromedp.CSS("#creds summary")),
			chromedp.SendKeys(chromedp.CSS("#admin-token"), token),
			js(`document.getElementById('admin-token').dispatchEvent(new Event('change'))`),
			chromedp.Click(chromedp.CSS("#creds summary")))
		waitFor(t, browserWait, "the cutoff read through FeedAdmin", func() bool {
			return strings.HasSuffix(text("#fo-cutoff"), "ms")
		})

		waitFor(t, browserWait, "the hedge suggest table", func() bool {
			return evalJS[int](t, bctx, `document.querySelectorAll('#fo-suggest-table tbody tr').length`) >= 2
		})
		// The server's validation refuses a budget above 1.
		browse("a bad knob", chromedp.SetValue(chromedp.CSS(`#fo-knobs [name=budget]`), "5"),
			chromedp.Click(chromedp.CSS("#fo-apply")))
		waitFor(t, browserWait, "the refusal", func() bool {
			return strings.Contains(text("#fo-knobs-status"), "invalid_argument")
		})
		browse("a good knob", chromedp.SetValue(chromedp.CSS(`#fo-knobs [name=budget]`), "0.05"),
			chromedp.SetValue(chromedp.CSS(`#fo-knobs [name=mode]`), "fixed"),
			chromedp.SetValue(chromedp.CSS(`#fo-knobs [name=delayMs]`), "37"),
			chromedp.Click(chromedp.CSS("#fo-apply")))
		waitFor(t, browserWait, "the change applied", func() bool {
			return strings.Contains(text("#fo-knobs-status"), "applied")
		})
		var show bytes.Buffer
		if err := run(t.Context(), []string{"hedge", "show", "--admin-grpc-addr", adminGRPC, "--admin-addr", adminHTTP,
			"--admin-token-file", tokenFile}, &show, io.Discard); err != nil {
			t.Fatalf("hedge show: %v", err)
		}
		for _, want := range []string{"mode           fixed", "fixed delay    37.00ms", "budget         5.00% extra load"} {
			if !strings.Contains(show.String(), want) {
				t.Errorf("hedge show lacks %q after the console's change:\n%s", want, show.String())
			}
		}

		// Whatever happens below, the primary comes back before the demo stops (its shutdown
		// flushes the replication from the primary).
		t.Cleanup(func() { restorePrimary(t, adminGRPC, token) })
		// The fault buttons are clicked through the DOM: the page's polls fill tables above them,
		// and a click at the coordinates read a moment before can land beside the button.
		browse("stop the primary", chromedp.WaitVisible(chromedp.CSS("#fo-primary-stop")),
			js(`document.getElementById('fo-primary-stop').click()`))
		waitPrimaryState(t, "stop", text)
		waitFor(t, browserWait, "most pages served from the standby", func() bool {
			s := strings.TrimSuffix(text("#fo-standby-rate"), "%")
			n, err := strconv.Atoi(s)
			return err == nil && n >= 50
		})
		shot("failover", true)

		// The feed page still answers, from the standby.
		// Loading the feed again: the "served from" mark is cleared first, and set by the answer.
		browse("the feed with the primary stopped", page("#feed"), js(`document.getElementById('feed-from').textContent = ''`),
			chromedp.Click(chromedp.CSS("#feed-load")))
		waitFor(t, browserWait, "the feed answered again", func() bool {
			if e := text("#feed-error"); e != "" {
				t.Fatalf("feed error with the primary stopped: %s", e)
			}
			return text("#feed-from") != ""
		})
		if e := text("#feed-error"); e != "" {
			t.Errorf("feed error with the primary stopped: %s", e)
		}
		if from := text("#feed-from"); from != "standby" {
			t.Errorf("the feed page was served from %q with the primary stopped, want standby", from)
		}
		browse("restart the primary", page("#failover"),
			chromedp.WaitVisible(chromedp.CSS("#fo-primary-normal")),
			js(`document.getElementById('fo-primary-normal').click()`))
		waitPrimaryState(t, "normal", text)
	})

	t.Run("queues: pause and resume a queue", func(t *testing.T) {
		const row = `#q-table tr[data-queue="fanout"]`
		browse("open queues", page("#queues"),
			chromedp.WaitVisible(chromedp.CSS(row)))
		browse("pause fanout", chromedp.Click(chromedp.CSS(row+" .q-pause")))
		waitFor(t, browserWait, "fanout paused", func() bool {
			if s := text("#q-status"); strings.Contains(s, "refused") {
				t.Fatalf("pause refused: %s", s)
			}
			return text(row+" .q-state") == "paused"
		})
		shot("queues", false)
		browse("resume fanout", chromedp.Click(chromedp.CSS(row+" .q-resume")))
		waitFor(t, browserWait, "fanout running", func() bool { return text(row+" .q-state") == "running" })
	})
}

// restorePrimary clears the faults of the primary feed store through FeedAdmin.
func restorePrimary(t *testing.T, adminGRPC, token string) {
	conn, err := grpc.NewClient(adminGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Errorf("admin client: %v", err)
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	if _, err := feedv1.NewFeedAdminClient(conn).SetFaults(ctx, &feedv1.Faults{Store: feedv1.Store_STORE_PRIMARY}); err != nil {
		t.Errorf("restore the primary: %v", err)
	}
}

// evalJS evaluates expr in the tab of ctx, failing t on an error.
func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// browserWait bounds the browser tests' waits for what a click or the console's next refresh
// shows: generous, because under make test the browser, the demo and other test binaries share
// two cores, and a wait that ends sooner ends as soon as the condition holds.
const browserWait = 60 * time.Second

// waitPrimaryState waits until the failover page's primary state (read with text) says want,
// logging each state it shows meanwhile, so that a failure says what the page said instead; a
// refused change fails at once.
func waitPrimaryState(t *testing.T, want string, text func(sel string) string) {
	t.Helper()
	last := ""
	waitFor(t, browserWait, "the primary state "+want, func() bool {
		st := text("#fo-primary-state")
		if st != last {
			t.Logf("#fo-primary-state: %q", st)
			last = st
		}
		if strings.HasPrefix(st, "refused") {
			t.Fatalf("the console's change to %s was refused: %s", want, st)
		}
		return strings.Contains(st, want)
	})
}

// waitFor polls cond every 200 ms until it holds, failing t after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// feedPins is how many pins a first page of size pins of user's feed holds, read through the
// console's Connect endpoint as the page does (0 on any error: the caller polls).
func feedPins(t *testing.T, base, user string, size int) int {
	t.Helper()
	body := fmt.Sprintf(`{"userIdStr":%q,"pageSize":%d}`, user, size)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"rpc/smartfeed.feed.v1.FeedService/GetFeed", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var page struct {
		Items []json.RawMessage `json:"items"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&page) != nil {
		return 0
	}
	return len(page.Items)
}

// browserOptions are the options of a headless Chromium at path chrome for the browser tests,
// with extra. Its temporary files (the singleton socket Chromium puts in $TMPDIR, which
// outlives it) are in a directory of t's, removed after the test; chromedp makes and removes
// the profile's directory itself.
func browserOptions(t *testing.T, chrome string, extra ...chromedp.ExecAllocatorOption) []chromedp.ExecAllocatorOption {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Env("TMPDIR="+t.TempDir()))
	return append(opts, extra...)
}

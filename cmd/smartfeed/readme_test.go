package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestREADMERoundTrip runs the README's "frontend's round trip" block as written, with the
// grpcurl the README names (go -C charts tool grpcurl), against a running `all`: only the
// address and the <placeholders> are filled in from the answers before them. The follower's
// feed then holds the pin.
func TestREADMERoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("builds grpcurl and starts the binary's services")
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)A frontend's round trip.*?```sh\n(.*?)```").FindSubmatch(b)
	if block == nil {
		t.Fatal("README: no round-trip block")
	}
	a, _ := startAll(t)
	line := regexp.MustCompile(`^\$G -d '(.*)'\s+127\.0\.0\.1:9090 (\S+)$`)
	ids := map[string]string{}
	var users []string
	var lastOut []byte
	calls := 0
	for _, l := range strings.Split(strings.TrimSpace(string(block[1])), "\n") {
		if strings.HasPrefix(l, "G=") {
			if l != `G="go -C charts tool grpcurl -plaintext"` {
				t.Fatalf("README's grpcurl is %s; this test runs go -C charts tool grpcurl -plaintext", l)
			}
			continue
		}
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("README line not understood: %s", l)
		}
		body, method := m[1], m[2]
		for k, v := range ids {
			body = strings.ReplaceAll(body, "<"+k+">", v)
		}
		if strings.Contains(body, "<") {
			t.Fatalf("unfilled placeholder in %s", body)
		}
		run := func() []byte {
			cmd := exec.Command("go", "-C", "../../charts", "tool", "grpcurl", "-plaintext", "-d", body, a.grpcAddr(), method)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s%s", l, err, out, stderr.String())
			}
			return out
		}
		out := run()
		if strings.HasSuffix(method, "/GetFeed") {
			// The fanout runs in the background: a person would look again too.
			for deadline := time.Now().Add(20 * time.Second); !strings.Contains(string(out), `"pinId"`) && time.Now().Before(deadline); {
				time.Sleep(200 * time.Millisecond)
				out = run()
			}
		}
		calls++
		lastOut = out
		var resp struct {
			IDStr    string `json:"idStr"`
			Username string `json:"username"`
		}
		_ = json.Unmarshal(out, &resp)
		switch {
		case strings.HasSuffix(method, "/CreateUser"):
			ids[resp.Username] = resp.IDStr
			users = append(users, resp.Username)
		case strings.HasSuffix(method, "/CreateBoard"):
			ids["board"] = resp.IDStr
		}
	}
	if calls < 6 || len(users) != 2 {
		t.Fatalf("%d calls, users %v", calls, users)
	}
	if !strings.Contains(string(lastOut), `"pinId"`) {
		t.Errorf("the follower's feed after the README's round trip has no pin:\n%s", lastOut)
	}
}

package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestReadinessFollowsRedis: /readyz answers 503 while Redis is down (kill -9) and 200 again
// once it is back on its port.
func TestReadinessFollowsRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := testConfig(t)
	cfg.Redis.Addr = r.Addr()
	a, err := newApp(t.Context(), roleAll, cfg, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	defer func() { cancel(); <-done }()
	readyz := func() int {
		resp, err := http.Get("http://" + a.adminAddr() + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitCode := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for readyz() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz never answered %d", what, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitCode(http.StatusOK, "started")
	r.Kill()
	t0 := time.Now()
	waitCode(http.StatusServiceUnavailable, "redis killed")
	t.Logf("not ready %v after redis was killed", time.Since(t0).Round(time.Millisecond))
	r.Start()
	waitCode(http.StatusOK, "redis back")
}

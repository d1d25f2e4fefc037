package main

import (
	"testing"
	"time"
)

func TestParseCutoffs(t *testing.T) {
	got, err := parseCutoffs("1ms, 20ms,,3s")
	if err != nil || len(got) != 3 || got[1] != 20*time.Millisecond {
		t.Fatalf("parseCutoffs = %v, %v", got, err)
	}
	for _, bad := range []string{"", "fast", "-1ms", "0s"} {
		if _, err := parseCutoffs(bad); err == nil {
			t.Errorf("parseCutoffs(%q): no error", bad)
		}
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestWeightsFlag: --weights reaches the worker's scorer: a valid file starts the worker role,
// a file with an unknown key or a NaN-prone value refuses to start and names the file.
func TestWeightsFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tt := range []struct {
		name, body, wantErr string
	}{
		{"good.json", `{"bias": -1, "source": {"related": 0.1}, "recency_half_life_hours": 12}`, ""},
		{"typo.json", `{"recency_half_life": 12}`, "unknown field"},
		{"zero.json", `{"recency_half_life_hours": 0}`, "recency_half_life_hours"},
		{"source.json", `{"source": {"friends": 1}}`, "unknown source"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Worker.WeightsFile = write(tt.name, tt.body)
			a, err := newApp(t.Context(), roleWorker, cfg, zap.NewNop(), newRegistry())
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				a.closeAll()
				return
			}
			if err == nil {
				a.closeAll()
				t.Fatalf("%s: started", tt.name)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.name) {
				t.Errorf("err %q, want %q and the file name", err, tt.wantErr)
			}
		})
	}
}

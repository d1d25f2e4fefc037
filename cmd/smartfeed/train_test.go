package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/zen"
)

// logImpressions writes n impressions into the engagement table under dir, engaged with a
// probability that rises with the user's affinity for the author (which the default weights
// barely use) and falls with the pin's popularity (which they reward).
func logImpressions(t *testing.T, dir string, n int) {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.Storage.DataDir = dir
	st := newStores(cfg.Storage, zap.NewNop(), nil)
	defer func() { _ = st.close() }()
	tab, err := st.table(t.Context(), storeMain, engagement.Table)
	if err != nil {
		t.Fatal(err)
	}
	s := engagement.NewStore(tab, 0, nil)
	r := rand.New(rand.NewPCG(5, 6))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for i := range n {
		user, _ := zen.NewID(1, zen.TypeUser, uint64(1+i%50))
		pin, _ := zen.NewID(1, zen.TypePin, uint64(1+i))
		in := engagement.Inputs{Source: "following", EngAuthor: r.Float64()*4 - 1, Saves: int64(r.IntN(200))}
		z := 2.5*in.EngAuthor - 0.4*math.Log1p(float64(in.Saves))
		evs := []engagement.Event{{Action: "impression", Pin: pin, AtMs: t0 + int64(i)*1000, Inputs: in}}
		if r.Float64() < 1/(1+math.Exp(-z)) {
			evs = append(evs, engagement.Event{Action: "click", Pin: pin, AtMs: t0 + int64(i)*1000 + 1})
		}
		if _, err := s.Apply(t.Context(), engagement.Batch{User: user, RequestID: fmt.Sprint(i), Arm: engagement.ArmDefault, Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
}

func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd(func(string) string { return "" }, &out, io.Discard)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String(), err
}

// TestTrain: smartfeed train learns from the impression log a model that beats the weights on
// the newest impressions, writes it as version 1, and, with --model-file naming it, trains
// version 2 against it; a model file with a NaN weight is refused with an error naming it.
func TestTrain(t *testing.T) {
	dir := t.TempDir()
	logImpressions(t, dir, 2000)
	models := filepath.Join(dir, "models")
	out, err := runCmd(t, "train", "--data-dir", dir, "--out", models)
	t.Log("\n" + out)
	if err != nil {
		t.Fatal(err)
	}
	v1 := filepath.Join(models, "model-v1.json")
	if !strings.Contains(out, "wrote "+v1) {
		t.Fatalf("train did not write %s", v1)
	}
	m, err := engagement.LoadModel(v1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Metrics == nil || m.Metrics.AUC < 0.75 {
		t.Errorf("learned model's held-out metrics %+v, want AUC ≥ 0.75", m.Metrics)
	}
	live := filepath.Join(dir, "model.json")
	if err := engagement.Install(v1, live); err != nil {
		t.Fatal(err)
	}
	out, err = runCmd(t, "train", "--data-dir", dir, "--out", models, "--model-file", live, "--force")
	if err != nil || !strings.Contains(out, "model-v2.json") || !strings.Contains(out, "current learned@v1") {
		t.Fatalf("second training against v1: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(v1)
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(b), `"weights": [`, `"weights": [NaN, `, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runCmd(t, "train", "--data-dir", dir, "--out", models, "--model-file", bad); err == nil || !strings.Contains(err.Error(), "bad model") {
		t.Errorf("train with a NaN model in use: %v, want a bad model error", err)
	}
}

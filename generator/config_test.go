package generator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/zen"
)

func TestDefaultConfigIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // substring of the error
	}{
		{"no sources", func(c *Config) { c.Sources = nil }, "none configured"},
		{"unknown source", func(c *Config) { c.Sources["trending"] = SourceConfig{Rate: 1} }, `unknown source "trending"`},
		{"negative rate", func(c *Config) { c.Sources["related"] = SourceConfig{Rate: -1} }, "sources.related.rate"},
		{"all rates zero", func(c *Config) {
			c.Sources = map[string]SourceConfig{"following": {}, "interest": {}}
		}, "at least one rate"},
		{"min over max", func(c *Config) { c.MinChunk, c.MaxChunk = 20, 10 }, "min_chunk 20 > max_chunk 10"},
		{"max too big", func(c *Config) { c.MaxChunk = HardMaxChunk + 1 }, "max_chunk"},
		{"read factor below 1", func(c *Config) { c.ReadFactor = 0.5 }, "read_factor"},
		{"negative max run", func(c *Config) { c.MaxRun = -1 }, "max_run"},
		{"zero max age", func(c *Config) { c.MaxAge = 0 }, "max_age"},
		{"zero take rounds", func(c *Config) { c.TakeRounds = 0 }, "take_rounds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"max_chunk": 30, "max_age": "48h", "sources": {"following": {"rate": 3, "threshold": 0.2}, "related": {"rate": 1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.MaxChunk = 30
	want.MaxAge = jsontime.Duration(48 * time.Hour)
	want.Sources = map[string]SourceConfig{"following": {Rate: 3, Threshold: 0.2}, "related": {Rate: 1}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("ParseConfig (-want +got):\n%s", diff)
	}
	plan := c.plan()
	if diff := cmp.Diff([]sourcePlan{
		{src: zen.SourceFollowing, name: "following", rate: 0.75, threshold: 0.2},
		{src: zen.SourceRelated, name: "related", rate: 0.25},
	}, plan, cmp.AllowUnexported(sourcePlan{})); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`{"max_chunk": "x"}`, `{"unknown": 1}`, `{"max_age": "forever"}`, `{"min_chunk": 0}`, `not json`} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%s) accepted", bad)
		}
	}
}

// TestReloadConfig: a reload puts the file's config in force for the next chunk; a bad file
// keeps the config in force.
func TestReloadConfig(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, backends[0].make, nil)
	e.fill(t, 50)
	path := filepath.Join(t.TempDir(), "generator.json")
	if err := os.WriteFile(path, []byte(`{"max_chunk": 7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.gen.ReloadConfig(path); err != nil {
		t.Fatal(err)
	}
	c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
	if err != nil || len(c.Items) != 7 {
		t.Fatalf("after reload: %d pins, %v; want 7", len(c.Items), err)
	}
	if err := os.WriteFile(path, []byte(`{"max_chunk": -3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.gen.ReloadConfig(path); err == nil {
		t.Fatal("reload of an invalid file succeeded")
	}
	if got := e.gen.Config().MaxChunk; got != 7 {
		t.Fatalf("config in force after a bad reload: max_chunk %d, want 7", got)
	}
	if err := e.gen.ReloadConfig(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("reload of a missing file succeeded")
	}
}

func TestAllocate(t *testing.T) {
	plan := DefaultConfig().plan()
	for _, tc := range []struct {
		name  string
		avail []int
		start []int
		n     int
		want  []int
	}{
		{"rates 60/25/15 of 20", []int{99, 99, 99}, nil, 20, []int{12, 5, 3}},
		{"rates of 10", []int{99, 99, 99}, nil, 10, []int{6, 3, 1}},
		{"interest short", []int{99, 1, 99}, nil, 20, []int{15, 1, 4}},
		{"only related", []int{0, 0, 5}, nil, 20, []int{0, 0, 5}},
		{"nothing", []int{0, 0, 0}, nil, 20, []int{0, 0, 0}},
		{"start counts", []int{99, 99, 99}, []int{0, 5, 0}, 20, []int{12, 5, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, allocate(plan, tc.avail, tc.start, tc.n)); diff != "" {
				t.Errorf("allocate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWantedSize(t *testing.T) {
	c := DefaultConfig() // base 10, 2/h, [5, 50]
	hour := int64(time.Hour / time.Millisecond)
	now := 1000 * hour
	for _, tc := range []struct {
		name      string
		last      int64
		owed, max int
		want      int
	}{
		{"first visit", 0, 0, 0, 50},
		{"just now", now, 0, 0, 10},
		{"3h away", now - 3*hour, 0, 0, 16},
		{"a week away", now - 168*hour, 0, 0, 50},
		{"owed raises", now, 30, 0, 30},
		{"request max caps", now - 3*hour, 0, 4, 4},
		{"request max caps owed", now, 30, 20, 20},
		{"clock behind", now + hour, 0, 0, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, note := wantedSize(&c, tc.last, now, tc.owed, tc.max); got != tc.want {
				t.Errorf("wantedSize = %d (%s), want %d", got, note, tc.want)
			}
		})
	}
}

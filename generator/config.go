package generator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/zen"
)

// HardMaxChunk is the largest chunk any configuration or request may ask for.
const HardMaxChunk = 1000

// SourceConfig is the mix and the deferral rule of one source.
type SourceConfig struct {
	// Rate is the source's share of a chunk, relative to the other sources' rates (they are
	// normalized, so 60/25/15 and 0.6/0.25/0.15 mean the same). A zero rate makes the source a
	// pure backfill: it is used only when the others run short.
	Rate float64 `json:"rate"`
	// Threshold is the score under which a pin of this source is weak: it is deferred to a later
	// session (left in the pool) unless the strong pins cannot fill MinChunk.
	Threshold float64 `json:"threshold"`
}

// Config tunes the generator. Zero fields are not defaults: start from DefaultConfig and
// override; Validate says what is wrong with a config.
type Config struct {
	// Sources maps a source name ("following", "interest", "related") to its rate and
	// threshold. Sources not listed are never read. Default: following 0.60, interest 0.25,
	// related 0.15, all with threshold 0.
	Sources map[string]SourceConfig `json:"sources"`
	// MinChunk and MaxChunk bound the chunk size (defaults 5 and 50). MinChunk is also the size
	// weak pins may top a chunk up to when strong pins run short.
	MinChunk int `json:"min_chunk"`
	MaxChunk int `json:"max_chunk"`
	// BaseChunk + PerHour × hours since the last visit is the wanted size before clamping
	// (defaults 10 and 2). A first visit asks for MaxChunk.
	BaseChunk int     `json:"base_chunk"`
	PerHour   float64 `json:"per_hour"`
	// ReadFactor bounds the reads: each source is read for its best ceil(n × ReadFactor) pins,
	// never more (default 2, range 1–10).
	ReadFactor float64 `json:"read_factor"`
	// MaxRun is the diversity rule: no more than MaxRun pins in a row from one author or from
	// one board, when the chunk allows it (default 2; 0 turns the rule off).
	MaxRun int `json:"max_run"`
	// MaxAge is how long a pin may wait in a pool (by its creation time) before it is dropped
	// as expired and counted (default 336h = 14 days).
	MaxAge jsontime.Duration `json:"max_age"`
	// ExpireEvery is how often a user's pools are swept for expired pins, at most (default 1h);
	// an expired pin among the candidates triggers a sweep at once.
	ExpireEvery jsontime.Duration `json:"expire_every"`
	// TakeRounds is how many times a chunk re-reads the pools to replace pins that a concurrent
	// request claimed first (default 3).
	TakeRounds int `json:"take_rounds"`
	// InFlightGrace is how old an unfinished (crashed) chunk must be before Pending recovers it,
	// so that a request still running is not disturbed (default 1m).
	InFlightGrace jsontime.Duration `json:"in_flight_grace"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Sources: map[string]SourceConfig{
			"following": {Rate: 0.60},
			"interest":  {Rate: 0.25},
			"related":   {Rate: 0.15},
		},
		MinChunk:      5,
		MaxChunk:      50,
		BaseChunk:     10,
		PerHour:       2,
		ReadFactor:    2,
		MaxRun:        2,
		MaxAge:        jsontime.Duration(14 * 24 * time.Hour),
		ExpireEvery:   jsontime.Duration(time.Hour),
		TakeRounds:    3,
		InFlightGrace: jsontime.Duration(time.Minute),
	}
}

// Validate reports every problem with c, or nil.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(c.Sources) == 0 {
		bad("sources: none configured")
	}
	total := 0.0
	names := make([]string, 0, len(c.Sources))
	for n := range c.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sc := c.Sources[n]
		if _, err := zen.ParseSource(n); err != nil {
			bad("sources: %w", err)
		}
		if math.IsNaN(sc.Rate) || math.IsInf(sc.Rate, 0) || sc.Rate < 0 {
			bad("sources.%s.rate: %v is not a finite rate >= 0", n, sc.Rate)
		} else {
			total += sc.Rate
		}
		if math.IsNaN(sc.Threshold) || math.IsInf(sc.Threshold, 0) {
			bad("sources.%s.threshold: %v is not finite", n, sc.Threshold)
		}
	}
	if len(c.Sources) > 0 && total <= 0 {
		bad("sources: at least one rate must be > 0")
	}
	if c.MinChunk < 1 || c.MinChunk > HardMaxChunk {
		bad("min_chunk: %d not in [1, %d]", c.MinChunk, HardMaxChunk)
	}
	if c.MaxChunk < 1 || c.MaxChunk > HardMaxChunk {
		bad("max_chunk: %d not in [1, %d]", c.MaxChunk, HardMaxChunk)
	}
	if c.MinChunk > c.MaxChunk {
		bad("min_chunk %d > max_chunk %d", c.MinChunk, c.MaxChunk)
	}
	if c.BaseChunk < 0 || c.BaseChunk > HardMaxChunk {
		bad("base_chunk: %d not in [0, %d]", c.BaseChunk, HardMaxChunk)
	}
	if math.IsNaN(c.PerHour) || math.IsInf(c.PerHour, 0) || c.PerHour < 0 {
		bad("per_hour: %v is not a finite value >= 0", c.PerHour)
	}
	if math.IsNaN(c.ReadFactor) || c.ReadFactor < 1 || c.ReadFactor > 10 {
		bad("read_factor: %v not in [1, 10]", c.ReadFactor)
	}
	if c.MaxRun < 0 {
		bad("max_run: %d < 0", c.MaxRun)
	}
	if c.MaxAge <= 0 {
		bad("max_age: must be > 0")
	}
	if c.ExpireEvery <= 0 {
		bad("expire_every: must be > 0")
	}
	if c.TakeRounds < 1 || c.TakeRounds > 10 {
		bad("take_rounds: %d not in [1, 10]", c.TakeRounds)
	}
	if c.InFlightGrace < 0 {
		bad("in_flight_grace: must be >= 0")
	}
	return errors.Join(errs...)
}

// ParseConfig reads a JSON config: fields absent from the JSON keep their defaults (a
// "sources" object, when present, replaces the default sources as a whole). Unknown fields
// are refused. The result is validated.
func ParseConfig(data []byte) (Config, error) {
	c := DefaultConfig()
	var raw struct {
		Sources map[string]SourceConfig `json:"sources"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("parse config: %w", err)
	}
	if raw.Sources != nil {
		c.Sources = nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("parse config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// LoadConfig reads and validates a JSON config file (see ParseConfig).
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// sourcePlan is the validated, indexed form of Config.Sources used on the hot path.
type sourcePlan struct {
	src       zen.Source
	name      string
	rate      float64 // normalized
	threshold float64
}

// plan lists the configured sources in source order with normalized rates.
func (c Config) plan() []sourcePlan {
	total := 0.0
	for _, sc := range c.Sources {
		total += sc.Rate
	}
	out := make([]sourcePlan, 0, len(c.Sources))
	for n, sc := range c.Sources {
		src, _ := zen.ParseSource(n) // Validate refused unknown names
		out = append(out, sourcePlan{src: src, name: n, rate: sc.Rate / total, threshold: sc.Threshold})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].src < out[j].src })
	return out
}

package hedge

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ReadLatencyMetric is the hedger's histogram of read latency, labelled by store (see metrics.go).
const ReadLatencyMetric = "smartfeed_hedge_read_seconds"

// Histogram is a cumulative latency histogram as Prometheus exports it; the zero value is empty.
type Histogram struct {
	Upper []float64 // bucket upper bounds in seconds, ascending; the last may be +Inf
	Cum   []uint64  // cumulative counts
}

// Count is the number of observations.
func (h Histogram) Count() uint64 {
	if len(h.Cum) == 0 {
		return 0
	}
	return h.Cum[len(h.Cum)-1]
}

// Quantile estimates the q-quantile (q in [0, 1]) by linear interpolation inside its bucket,
// like PromQL's histogram_quantile.
func (h Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	lower, prev := 0.0, uint64(0)
	for i, up := range h.Upper {
		if float64(h.Cum[i]) >= rank {
			if math.IsInf(up, 1) {
				return seconds(lower)
			}
			inBucket := float64(h.Cum[i] - prev)
			if inBucket == 0 {
				return seconds(up)
			}
			return seconds(lower + (up-lower)*(rank-float64(prev))/inBucket)
		}
		lower, prev = up, h.Cum[i]
	}
	return seconds(lower)
}

// Since is what h counted after old, an earlier snapshot of the same histogram: the
// observations in between. It is empty when old has other buckets or counts more than h (not an
// earlier snapshot: the process restarted, say); the empty old gives h.
func (h Histogram) Since(old Histogram) Histogram {
	if len(old.Cum) == 0 {
		return h
	}
	if !slices.Equal(old.Upper, h.Upper) {
		return Histogram{}
	}
	out := Histogram{Upper: h.Upper, Cum: make([]uint64, len(h.Cum))}
	for i := range h.Cum {
		if h.Cum[i] < old.Cum[i] {
			return Histogram{}
		}
		out.Cum[i] = h.Cum[i] - old.Cum[i]
	}
	return out
}

// sampler draws latencies distributed like h: a bucket by its share of the count, then a
// uniform point inside it (the +Inf bucket is read as [last bound, 2 × last bound]).
func (h Histogram) sampler(r *rand.Rand) func() float64 {
	n := h.Count()
	return func() float64 {
		k := uint64(r.Int64N(int64(n))) + 1
		i, _ := slices.BinarySearch(h.Cum, k)
		lower := 0.0
		if i > 0 {
			lower = h.Upper[i-1]
		}
		upper := h.Upper[i]
		if math.IsInf(upper, 1) {
			upper = 2 * lower
		}
		return lower + r.Float64()*(upper-lower)
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ErrNoReadLatency is what ParseReadLatency returns (wrapped) for an exposition without
// ReadLatencyMetric: a feed process that has made no read yet, or a process of another role.
var ErrNoReadLatency = errors.New("no " + ReadLatencyMetric + " in the metrics")

// ParseReadLatency reads the primary and standby histograms of the hedger from a Prometheus
// text exposition (a feed process's /metrics).
func ParseReadLatency(r io.Reader) (primary, standby Histogram, err error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return primary, standby, fmt.Errorf("parse metrics: %w", err)
	}
	fam, ok := fams[ReadLatencyMetric]
	if !ok {
		return primary, standby, fmt.Errorf("%w: is this a feedsvc admin port?", ErrNoReadLatency)
	}
	primary, standby = ReadLatency(fam)
	return primary, standby, nil
}

// ReadLatency splits the family of ReadLatencyMetric (from a registry's Gather, say) into
// the primary's and the standby's histograms; a store with no series is the empty Histogram.
func ReadLatency(fam *dto.MetricFamily) (primary, standby Histogram) {
	for _, m := range fam.GetMetric() {
		h := HistogramOf(m.GetHistogram())
		for _, l := range m.GetLabel() {
			if l.GetName() != "store" {
				continue
			}
			switch l.GetValue() {
			case "primary":
				primary = h
			case "standby":
				standby = h
			}
		}
	}
	return primary, standby
}

// HistogramOf is the Histogram of a gathered Prometheus histogram series (any, not only the
// hedger's).
func HistogramOf(h *dto.Histogram) Histogram {
	var out Histogram
	for _, b := range h.GetBucket() {
		out.Upper = append(out.Upper, b.GetUpperBound())
		out.Cum = append(out.Cum, b.GetCumulativeCount())
	}
	if len(out.Upper) == 0 || !math.IsInf(out.Upper[len(out.Upper)-1], 1) {
		out.Upper = append(out.Upper, math.Inf(1))
		out.Cum = append(out.Cum, h.GetSampleCount())
	}
	return out
}

// Suggestion is the replayed outcome of one candidate cutoff (see Suggest).
type Suggestion struct {
	Cutoff    time.Duration // 0 = never hedge on the cutoff
	HedgeRate float64       // fraction of calls that hedged
	ExtraLoad float64       // extra reads per call (= HedgeRate: one standby read per hedge)
	P50, P99  time.Duration
	P999      time.Duration
}

// Suggest replays samples calls with latencies drawn from the recorded primary and
// standby histograms, once per cutoff: a call whose primary read exceeds the cutoff hedges
// when the budget has a token (each call earns budget tokens, burst at most burst), and then
// takes min(primary, cutoff + standby). The same draws are used for every cutoff, so the rows
// compare like for like.
func Suggest(primary, standby Histogram, cutoffs []time.Duration, budget, burst float64, samples int, seed uint64) ([]Suggestion, error) {
	if primary.Count() == 0 {
		return nil, errors.New("no primary latencies recorded yet: serve some feeds first")
	}
	if standby.Count() == 0 {
		return nil, errors.New("no standby latencies recorded yet (hedges or warm-up reads fill them): serve some feeds, or raise the warm-up fraction")
	}
	if samples < 1000 {
		return nil, fmt.Errorf("samples %d: need at least 1000 for a p99.9", samples)
	}
	r := rand.New(rand.NewPCG(seed, seed+1))
	ps, ss := primary.sampler(r), standby.sampler(r)
	p := make([]float64, samples)
	s := make([]float64, samples)
	for i := range samples {
		p[i], s[i] = ps(), ss()
	}
	out := make([]Suggestion, 0, len(cutoffs))
	lat := make([]float64, samples)
	for _, c := range cutoffs {
		cs := c.Seconds()
		tokens, hedges := burst, 0
		for i := range samples {
			tokens = min(burst, tokens+budget)
			lat[i] = p[i]
			if c > 0 && p[i] > cs && tokens >= 1 {
				tokens--
				hedges++
				lat[i] = min(p[i], cs+s[i])
			}
		}
		slices.Sort(lat)
		q := func(f float64) time.Duration { return seconds(lat[min(samples-1, int(f*float64(samples)))]) }
		rate := float64(hedges) / float64(samples)
		out = append(out, Suggestion{Cutoff: c, HedgeRate: rate, ExtraLoad: rate, P50: q(0.5), P99: q(0.99), P999: q(0.999)})
	}
	return out, nil
}

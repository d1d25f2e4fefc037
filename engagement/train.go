package engagement

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Example is one labelled impression.
type Example struct {
	In   Inputs
	Y    float64 // 1 engaged, 0 not
	AtMs int64
	Arm  string
}

// ExampleOf is the training example of a log row.
func ExampleOf(r LogRow) Example {
	y := 0.0
	if r.Engaged() {
		y = 1
	}
	return Example{In: r.Inputs, Y: y, AtMs: r.AtMs, Arm: r.Arm}
}

// SplitByTime orders examples by time and returns the oldest 1−testFraction as the training set
// and the newest as the test set, so a model is judged on impressions after those it learned
// from, as it will be used.
func SplitByTime(ex []Example, testFraction float64) (train, test []Example) {
	ex = slices.Clone(ex)
	slices.SortStableFunc(ex, func(a, b Example) int { return int(sign(a.AtMs - b.AtMs)) })
	cut := len(ex) - int(math.Round(float64(len(ex))*testFraction))
	cut = max(0, min(cut, len(ex)))
	return ex[:cut], ex[cut:]
}

func sign(v int64) int64 {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// FitOptions tune Fit.
type FitOptions struct {
	// L2 is the ridge penalty on the weights other than the bias (default 1).
	L2 float64
	// Iterations bounds the Newton steps (default 25).
	Iterations int
	// RecencyHalfLifeHours is the half-life of the recency feature (default 24).
	RecencyHalfLifeHours float64
}

// ErrNoData is returned by Fit and Train when there is nothing to learn from.
var ErrNoData = errors.New("no training data")

// Fit fits a logistic regression over Vector to the examples by Newton's method (iteratively
// reweighted least squares) with an L2 penalty, which for this handful of features converges in
// a few steps and needs no learning rate. The weights are returned in FeatureNames order.
func Fit(ex []Example, o FitOptions) ([]float64, error) {
	if o.L2 <= 0 {
		o.L2 = 1
	}
	if o.Iterations <= 0 {
		o.Iterations = 25
	}
	if o.RecencyHalfLifeHours <= 0 {
		o.RecencyHalfLifeHours = 24
	}
	if len(ex) == 0 {
		return nil, ErrNoData
	}
	d := len(FeatureNames)
	xs := make([][]float64, len(ex))
	for i, e := range ex {
		xs[i] = Vector(e.In, o.RecencyHalfLifeHours)
	}
	w := make([]float64, d)
	for it := 0; it < o.Iterations; it++ {
		grad := make([]float64, d)
		hess := make([][]float64, d)
		for i := range hess {
			hess[i] = make([]float64, d)
		}
		for i, x := range xs {
			p := sigmoid(dot(w, x))
			r := p - ex[i].Y
			s := math.Max(p*(1-p), 1e-9)
			for a := range d {
				grad[a] += r * x[a]
				for b := range d {
					hess[a][b] += s * x[a] * x[b]
				}
			}
		}
		for a := 1; a < d; a++ {
			grad[a] += o.L2 * w[a]
			hess[a][a] += o.L2
		}
		hess[0][0] += 1e-6
		step, err := solve(hess, grad)
		if err != nil {
			return nil, fmt.Errorf("fit: %w", err)
		}
		var size float64
		for a := range d {
			w[a] -= step[a]
			size = math.Max(size, math.Abs(step[a]))
		}
		if size < 1e-8 {
			break
		}
	}
	for _, v := range w {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("fit: %w: the weights diverged", ErrBadModel)
		}
	}
	return w, nil
}

// solve solves a·x = b by Gaussian elimination with partial pivoting (a is copied).
func solve(a [][]float64, b []float64) ([]float64, error) {
	n := len(b)
	m := make([][]float64, n)
	for i := range a {
		m[i] = append(slices.Clone(a[i]), b[i])
	}
	for c := range n {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[p][c]) {
				p = r
			}
		}
		if math.Abs(m[p][c]) < 1e-12 {
			return nil, errors.New("singular system")
		}
		m[c], m[p] = m[p], m[c]
		for r := c + 1; r < n; r++ {
			f := m[r][c] / m[c][c]
			for k := c; k <= n; k++ {
				m[r][k] -= f * m[c][k]
			}
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := m[r][n]
		for k := r + 1; k < n; k++ {
			s -= m[r][k] * x[k]
		}
		x[r] = s / m[r][r]
	}
	return x, nil
}

// AUC is the area under the ROC curve of scores against labels (the probability that a random
// positive scores above a random negative, ties counting half). It is 0.5 when either class is
// empty.
func AUC(scores, labels []float64) float64 {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return scores[idx[a]] < scores[idx[b]] })
	var pos, neg, rankSum float64
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && scores[idx[j]] == scores[idx[i]] {
			j++
		}
		avg := float64(i+j+1) / 2 // ranks are 1-based
		for k := i; k < j; k++ {
			if labels[idx[k]] > 0.5 {
				rankSum += avg
				pos++
			} else {
				neg++
			}
		}
		i = j
	}
	if pos == 0 || neg == 0 {
		return 0.5
	}
	return (rankSum - pos*(pos+1)/2) / (pos * neg)
}

// LogLoss is the mean negative log-likelihood of labels under scores (clipped to [1e-15,
// 1−1e-15]).
func LogLoss(scores, labels []float64) float64 {
	if len(scores) == 0 {
		return 0
	}
	var s float64
	for i, p := range scores {
		p = math.Min(math.Max(p, 1e-15), 1-1e-15)
		if labels[i] > 0.5 {
			s -= math.Log(p)
		} else {
			s -= math.Log(1 - p)
		}
	}
	return s / float64(len(scores))
}

// Evaluate scores the examples with m and returns its metrics.
func Evaluate(m *Model, ex []Example) Metrics {
	sc, y := make([]float64, len(ex)), make([]float64, len(ex))
	for i, e := range ex {
		sc[i], y[i] = m.Score(e.In), e.Y
	}
	return Metrics{AUC: AUC(sc, y), LogLoss: LogLoss(sc, y), TestRows: len(ex)}
}

// TrainResult is the outcome of Train: the new model, and both models' figures on the same
// held-out (newest) impressions.
type TrainResult struct {
	Model              *Model
	Current            Metrics
	Learned            Metrics
	TrainRows          int
	Positives          int
	CurrentName        string
	Better             bool // the learned model's AUC is at least the current one's
	ArmStats           []ArmStat
	TestFraction       float64
	TrainedFromToMs    [2]int64
	HeldOutFromToMs    [2]int64
	RecencyHalfLifeHrs float64
}

// TrainOptions configure Train.
type TrainOptions struct {
	// TestFraction is the newest share of impressions held out (default 0.2).
	TestFraction float64
	Fit          FitOptions
	// Version and Name of the new model; NowMs stamps it.
	Version int64
	Name    string
	NowMs   int64
}

// Train fits a model to the log's examples, holding out the newest impressions, and compares it
// with current (the model serving now) on them.
func Train(ex []Example, current *Model, o TrainOptions) (TrainResult, error) {
	if o.TestFraction <= 0 || o.TestFraction >= 1 {
		o.TestFraction = 0.2
	}
	if o.Fit.RecencyHalfLifeHours <= 0 {
		o.Fit.RecencyHalfLifeHours = current.RecencyHalfLifeHours
	}
	train, test := SplitByTime(ex, o.TestFraction)
	if len(train) == 0 || len(test) == 0 {
		return TrainResult{}, fmt.Errorf("train: %w: %d impressions logged", ErrNoData, len(ex))
	}
	w, err := Fit(train, o.Fit)
	if err != nil {
		return TrainResult{}, err
	}
	m := &Model{Version: o.Version, Name: o.Name, Features: slices.Clone(FeatureNames), Weights: w,
		RecencyHalfLifeHours: o.Fit.RecencyHalfLifeHours, TrainedAtMs: o.NowMs}
	res := TrainResult{Model: m, Current: Evaluate(current, test), Learned: Evaluate(m, test),
		TrainRows: len(train), CurrentName: current.Label(), TestFraction: o.TestFraction,
		ArmStats: ArmStats(ex), RecencyHalfLifeHrs: m.RecencyHalfLifeHours,
		TrainedFromToMs: [2]int64{train[0].AtMs, train[len(train)-1].AtMs},
		HeldOutFromToMs: [2]int64{test[0].AtMs, test[len(test)-1].AtMs}}
	for _, e := range train {
		if e.Y > 0.5 {
			res.Positives++
		}
	}
	lm := res.Learned
	m.Metrics = &lm
	res.Better = res.Learned.AUC >= res.Current.AUC
	return res, nil
}

// String is the report `smartfeed train` prints.
func (r TrainResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "trained on %d impressions (%d engaged), held out the newest %d (%.0f%%)\n",
		r.TrainRows, r.Positives, r.Learned.TestRows, 100*r.TestFraction)
	fmt.Fprintf(&b, "%-24s %8s %9s\n", "model", "AUC", "log-loss")
	fmt.Fprintf(&b, "%-24s %8.4f %9.4f\n", "current "+r.CurrentName, r.Current.AUC, r.Current.LogLoss)
	fmt.Fprintf(&b, "%-24s %8.4f %9.4f\n", "learned "+r.Model.Label(), r.Learned.AUC, r.Learned.LogLoss)
	for _, s := range r.ArmStats {
		fmt.Fprintf(&b, "arm %-10s impressions %7d engaged %6d rate %.4f (95%% CI %.4f–%.4f)\n",
			s.Arm, s.Impressions, s.Engaged, s.Rate, s.Low, s.High)
	}
	return b.String()
}

// ArmStat is an experiment arm's engagement rate over the impression log, with its Wilson 95%
// confidence interval.
type ArmStat struct {
	Arm                  string
	Impressions, Engaged int
	Rate, Low, High      float64
}

// ArmStats returns the engagement rate of each arm (impressions whose labels include a positive
// action), arms in name order.
func ArmStats(ex []Example) []ArmStat {
	by := map[string]*ArmStat{}
	for _, e := range ex {
		arm := e.Arm
		if arm == "" {
			arm = ArmDefault
		}
		s := by[arm]
		if s == nil {
			s = &ArmStat{Arm: arm}
			by[arm] = s
		}
		s.Impressions++
		if e.Y > 0.5 {
			s.Engaged++
		}
	}
	out := make([]ArmStat, 0, len(by))
	for _, s := range by {
		s.Rate, s.Low, s.High = Wilson(s.Engaged, s.Impressions)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b ArmStat) int { return strings.Compare(a.Arm, b.Arm) })
	return out
}

// Wilson returns k/n and the Wilson score 95% interval around it (0, 0, 0 for n = 0).
func Wilson(k, n int) (rate, low, high float64) {
	if n == 0 {
		return 0, 0, 0
	}
	const z = 1.96
	p, nf := float64(k)/float64(n), float64(n)
	den := 1 + z*z/nf
	mid := (p + z*z/(2*nf)) / den
	half := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / den
	return p, math.Max(0, mid-half), math.Min(1, mid+half)
}

// Package render draws the chart's Grafana dashboards without Grafana: each panel's queries,
// with the dashboard's variables substituted, are evaluated over a time range through
// Prometheus's HTTP API (query_range) and drawn as line charts laid out on the dashboard's grid,
// one PNG per dashboard (Draw). The pictures in docs/operations.md come from it
// (scripts/dashboards-render.sh); they show what the panels plot, not how Grafana styles them.
package render

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/smartfeed/smartfeed/internal/observability"
	"github.com/smartfeed/smartfeed/internal/quote"
)

// RateInterval is Grafana's $__rate_interval for a query step and Prometheus's scrape interval:
// the larger of step + scrape and four scrapes, so a rate always spans at least two samples.
func RateInterval(step, scrape time.Duration) time.Duration {
	return max(step+scrape, 4*scrape)
}

// Vars are the values of a dashboard's variables, by name without the "$": "namespace",
// "__rate_interval", "__interval"...
type Vars map[string]string

// QueryVars are the variables of the chart's dashboards for a query at step against a
// Prometheus scraping every scrape: namespace (a regex the namespace label must match),
// Grafana's interval variables, and the data source (which names no series).
func QueryVars(namespace string, step, scrape time.Duration) Vars {
	return Vars{
		"namespace":       namespace,
		"datasource":      "prometheus",
		"__rate_interval": model.Duration(RateInterval(step, scrape)).String(),
		"__interval":      model.Duration(step).String(),
	}
}

// varRef is a variable reference as Grafana writes them: ${name}, ${name:format}, $name, [[name]].
var varRef = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// Substitute replaces every variable reference of expr with its value in vars. A reference to a
// variable vars does not hold is an error, so a dashboard gaining a variable is noticed here
// rather than sent to Prometheus as text it cannot parse.
func Substitute(expr string, vars Vars) (string, error) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return ref
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("no value for variable %s", quote.Q(strings.Join(missing, ", ")))
	}
	return out, nil
}

// Query is one target of a panel: the expression with the variables substituted, and its
// legend format.
type Query struct {
	Expr   string
	Legend string
}

// Panel is a dashboard panel ready to evaluate: a graph or stat with its queries, or a row
// header (Type "row", no queries).
type Panel struct {
	Title   string
	Type    string
	Unit    string
	Grid    observability.GridPos
	Queries []Query
}

// Plan returns d's panels in order with their queries' variables substituted by vars.
func Plan(d observability.Dashboard, vars Vars) ([]Panel, error) {
	out := make([]Panel, 0, len(d.Panels))
	for _, p := range d.Panels {
		rp := Panel{Title: p.Title, Type: p.Type, Grid: p.GridPos}
		if p.FieldConfig != nil {
			rp.Unit = p.FieldConfig.Defaults.Unit
		}
		for _, t := range p.Targets {
			expr, err := Substitute(t.Expr, vars)
			if err != nil {
				return nil, fmt.Errorf("dashboard %s, panel %q, target %s: %w", d.UID, p.Title, t.RefID, err)
			}
			rp.Queries = append(rp.Queries, Query{Expr: expr, Legend: t.LegendFormat})
		}
		out = append(out, rp)
	}
	return out, nil
}

// legendRef is a label reference in a legend format: {{label}} or {{ label }}.
var legendRef = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// Legend is the name Grafana gives a series: format with each {{label}} replaced by the
// series' value of that label (empty when it has none); with no format, the series' labels.
func Legend(format string, labels map[string]string) string {
	if format == "" {
		return model.LabelSet(toLabelSet(labels)).String()
	}
	return legendRef.ReplaceAllStringFunc(format, func(ref string) string {
		return labels[legendRef.FindStringSubmatch(ref)[1]]
	})
}

func toLabelSet(labels map[string]string) model.LabelSet {
	ls := make(model.LabelSet, len(labels))
	for k, v := range labels {
		ls[model.LabelName(k)] = model.LabelValue(v)
	}
	return ls
}

// Point is one value of a series at a time.
type Point struct {
	T time.Time
	V float64 // NaN where Prometheus answered NaN (a ratio of zeros, a quantile of no samples)
}

// Series is one line of a panel.
type Series struct {
	Name   string
	Points []Point
}

// Client evaluates queries on a Prometheus server's HTTP API.
type Client struct {
	URL  string // the server's base URL, http://127.0.0.1:9090
	HTTP *http.Client
}

// Range is the time range and step queries are evaluated over.
type Range struct {
	Start, End time.Time
	Step       time.Duration
}

// queryRangeResponse is the part of /api/v1/query_range's answer read here.
type queryRangeResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	} `json:"data"`
}

// QueryRange evaluates q over r and returns its series, named by q's legend format, sorted by
// name. An expression Prometheus rejects is an error.
func (c Client) QueryRange(ctx context.Context, q Query, r Range) ([]Series, error) {
	form := url.Values{
		"query": {q.Expr},
		"start": {strconv.FormatInt(r.Start.Unix(), 10)},
		"end":   {strconv.FormatInt(r.End.Unix(), 10)},
		"step":  {strconv.FormatFloat(r.Step.Seconds(), 'f', -1, 64)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+"/api/v1/query_range", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("query_range: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query_range: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("query_range: %w", err)
	}
	var qr queryRangeResponse
	if err := json.Unmarshal(body, &qr); err != nil {
		return nil, fmt.Errorf("query_range: HTTP %d, %s", resp.StatusCode, quote.Message(string(body), 512))
	}
	if qr.Status != "success" {
		return nil, fmt.Errorf("query_range %s: %s: %s", quote.Q(q.Expr), qr.ErrorType, quote.Message(qr.Error, 512))
	}
	if qr.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("query_range %s: result type %q, want matrix", quote.Q(q.Expr), qr.Data.ResultType)
	}
	out := make([]Series, 0, len(qr.Data.Result))
	for _, res := range qr.Data.Result {
		s := Series{Name: Legend(q.Legend, res.Metric)}
		for _, v := range res.Values {
			p, err := point(v)
			if err != nil {
				return nil, fmt.Errorf("query_range %s: %w", quote.Q(q.Expr), err)
			}
			s.Points = append(s.Points, p)
		}
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// point reads one [unix seconds, "value"] pair of a matrix.
func point(v [2]any) (Point, error) {
	ts, ok := v[0].(float64)
	str, ok2 := v[1].(string)
	if !ok || !ok2 {
		return Point{}, errors.New("a sample is not [time, \"value\"]")
	}
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return Point{}, fmt.Errorf("sample value %s: %w", quote.Q(str), err)
	}
	sec := int64(ts)
	return Point{T: time.Unix(sec, int64((ts-float64(sec))*1e9)).UTC(), V: f}, nil
}

// Result is a panel and the series its queries returned.
type Result struct {
	Panel  Panel
	Series []Series
}

// Evaluate runs every query of panels over r and returns one Result per panel.
func (c Client) Evaluate(ctx context.Context, panels []Panel, r Range) ([]Result, error) {
	out := make([]Result, 0, len(panels))
	for _, p := range panels {
		res := Result{Panel: p}
		for _, q := range p.Queries {
			s, err := c.QueryRange(ctx, q, r)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %w", p.Title, err)
			}
			res.Series = append(res.Series, s...)
		}
		out = append(out, res)
	}
	return out, nil
}

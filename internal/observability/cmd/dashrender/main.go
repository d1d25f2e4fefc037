// Command dashrender draws the chart's Grafana dashboards from a Prometheus server: every panel's
// queries evaluated over a time range (query_range), one PNG per dashboard, named after its JSON
// file. scripts/dashboards-render.sh runs it after a demo run that a Prometheus scraped.
//
//	go run ./internal/observability/cmd/dashrender -prometheus http://127.0.0.1:9099 \
//	    -start 2026-12-06T10:00:00Z -end 2026-12-06T10:05:00Z -out docs/dashboards
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/smartfeed/smartfeed/internal/observability"
	"github.com/smartfeed/smartfeed/internal/observability/render"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dashrender:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		prom      = flag.String("prometheus", "http://127.0.0.1:9090", "base URL of the Prometheus server")
		dir       = flag.String("dashboards", observability.DashboardsDir, "folder of the dashboards' JSON")
		out       = flag.String("out", "docs/dashboards", "folder the PNGs are written to")
		start     = flag.String("start", "", "start of the range, RFC 3339")
		end       = flag.String("end", "", "end of the range, RFC 3339")
		step      = flag.Duration("step", 5*time.Second, "query step")
		scrape    = flag.Duration("scrape-interval", 5*time.Second, "the Prometheus's scrape interval ($__rate_interval)")
		namespace = flag.String("namespace", ".*", "value of $namespace (a regex of namespace label values)")
		what      = flag.String("what", "", "what the run was, for the caption")
	)
	flag.Parse()
	var r render.Range
	var err error
	if r.Start, err = time.Parse(time.RFC3339, *start); err != nil {
		return fmt.Errorf("-start: %w", err)
	}
	if r.End, err = time.Parse(time.RFC3339, *end); err != nil {
		return fmt.Errorf("-end: %w", err)
	}
	if r.Step = *step; r.Step <= 0 || !r.End.After(r.Start) {
		return fmt.Errorf("want -step > 0 and -end after -start")
	}
	files, err := filepath.Glob(filepath.Join(*dir, "*.json"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no dashboards under %s", *dir)
	}
	sort.Strings(files)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	c := render.Client{URL: *prom}
	vars := render.QueryVars(*namespace, r.Step, *scrape)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var d observability.Dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		panels, err := render.Plan(d, vars)
		if err != nil {
			return err
		}
		results, err := c.Evaluate(context.Background(), panels, r)
		if err != nil {
			return fmt.Errorf("%s: %w", d.UID, err)
		}
		caption := render.Caption(filepath.Base(f), r)
		if *what != "" {
			caption = strings.Replace(caption, " evaluated", " from "+*what+", evaluated", 1)
		}
		png, err := render.Draw(render.Page{Title: d.Title, Caption: caption, Range: r}, results)
		if err != nil {
			return fmt.Errorf("%s: %w", d.UID, err)
		}
		name := filepath.Join(*out, strings.TrimSuffix(filepath.Base(f), ".json")+".png")
		if err := os.WriteFile(name, png, 0o644); err != nil {
			return err
		}
		var empty []string
		for _, res := range results {
			if res.Panel.Type != "row" && len(res.Series) == 0 {
				empty = append(empty, res.Panel.Title)
			}
		}
		fmt.Printf("%s: %d panels, %d KB", name, len(results), len(png)/1024)
		if len(empty) > 0 {
			fmt.Printf("; no data: %s", strings.Join(empty, "; "))
		}
		fmt.Println()
	}
	return nil
}

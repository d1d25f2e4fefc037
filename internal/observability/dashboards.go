package observability

import (
	"encoding/json"
	"fmt"
)

// Dashboard is the part of Grafana's dashboard JSON model the chart's dashboards use.
type Dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	Description   string     `json:"description,omitempty"`
	Tags          []string   `json:"tags"`
	Timezone      string     `json:"timezone"`
	SchemaVersion int        `json:"schemaVersion"`
	Refresh       string     `json:"refresh"`
	Time          TimeRange  `json:"time"`
	Templating    Templating `json:"templating"`
	Panels        []Panel    `json:"panels"`
}

// TimeRange is a dashboard's default time range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Templating holds a dashboard's variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Variable is a dashboard variable: the Prometheus data source, or a label's values.
type Variable struct {
	Name       string      `json:"name"`
	Label      string      `json:"label"`
	Type       string      `json:"type"`
	Query      string      `json:"query"`
	Datasource *Datasource `json:"datasource,omitempty"`
	Refresh    int         `json:"refresh,omitempty"`
	IncludeAll bool        `json:"includeAll,omitempty"`
	Multi      bool        `json:"multi,omitempty"`
}

// Datasource names the data source of a panel or variable.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is one panel: a time series graph, a stat or a row header.
type Panel struct {
	ID          int          `json:"id"`
	Type        string       `json:"type"`
	Title       string       `json:"title"`
	Description string       `json:"description,omitempty"`
	GridPos     GridPos      `json:"gridPos"`
	Datasource  *Datasource  `json:"datasource,omitempty"`
	Targets     []Target     `json:"targets,omitempty"`
	FieldConfig *FieldConfig `json:"fieldConfig,omitempty"`
}

// GridPos places a panel on the dashboard's 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat,omitempty"`
	Datasource   *Datasource `json:"datasource,omitempty"`
}

// FieldConfig sets the unit of a panel's values.
type FieldConfig struct {
	Defaults FieldDefaults `json:"defaults"`
}

// FieldDefaults holds the unit and the decimals shown.
type FieldDefaults struct {
	Unit     string `json:"unit,omitempty"`
	Decimals *int   `json:"decimals,omitempty"`
}

// ds is the data source every panel uses: the dashboard's datasource variable.
var ds = &Datasource{Type: "prometheus", UID: "${datasource}"}

// q is a target: an expression and its legend.
type q struct{ expr, legend string }

// builder lays panels out left to right, two or three to a row.
type builder struct {
	d    Dashboard
	x, y int
}

func newDashboard(uid, title, desc string) *builder {
	return &builder{d: Dashboard{
		UID: uid, Title: title, Description: desc, Tags: []string{"smartfeed"}, Timezone: "utc",
		SchemaVersion: 39, Refresh: "30s", Time: TimeRange{From: "now-6h", To: "now"},
		Templating: Templating{List: []Variable{
			{Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus"},
			{Name: "namespace", Label: "Namespace", Type: "query", Datasource: ds, Refresh: 2,
				Query: "label_values(smartfeed_hedge_policy, namespace)", IncludeAll: true, Multi: true},
		}},
	}}
}

// row starts a row of panels under a title.
func (b *builder) row(title string) {
	if b.x > 0 {
		b.x, b.y = 0, b.y+8
	}
	b.d.Panels = append(b.d.Panels, Panel{ID: len(b.d.Panels) + 1, Type: "row", Title: title, GridPos: GridPos{H: 1, W: 24, X: 0, Y: b.y}})
	b.y++
}

// panel adds a panel of kind (timeseries or stat), w columns wide, in unit.
func (b *builder) panel(kind, title, desc, unit string, w int, qs ...q) {
	if b.x+w > 24 {
		b.x, b.y = 0, b.y+8
	}
	p := Panel{ID: len(b.d.Panels) + 1, Type: kind, Title: title, Description: desc, Datasource: ds,
		GridPos: GridPos{H: 8, W: w, X: b.x, Y: b.y}, FieldConfig: &FieldConfig{Defaults: FieldDefaults{Unit: unit}}}
	for i, t := range qs {
		p.Targets = append(p.Targets, Target{RefID: string(rune('A' + i)), Expr: t.expr, LegendFormat: t.legend, Datasource: ds})
	}
	b.d.Panels = append(b.d.Panels, p)
	b.x += w
}

// ns is the namespace selector every query carries.
const ns = `namespace=~"$namespace"`

// notInvalid is the rate of GetFeed calls that count for availability. The error ratio falls back
// to 0 times it: the counter has no series for an error outcome before the first error, and the
// panel shows 0, not "no data", for a deployment that never failed.
const notInvalid = `sum(rate(smartfeed_feed_requests_total{` + ns + `,outcome!="invalid"}[$__rate_interval]))`

// Dashboards returns the chart's dashboards by file name.
func Dashboards() map[string]Dashboard {
	return map[string]Dashboard{
		"smartfeed-feed-serving.json": feedServing(),
		"smartfeed-pipeline.json":     pipeline(),
		"smartfeed-storage.json":      storage(),
		"smartfeed-slo.json":          slo(),
	}
}

func feedServing() Dashboard {
	b := newDashboard("smartfeed-feed-serving", "SmartFeed / Feed serving", "GetFeed: rate, errors, latency, fresh chunks, hedged reads and the standby's share.")
	b.row("GetFeed")
	b.panel("timeseries", "GetFeed calls by outcome", "smartfeed_feed_requests_total by outcome: ok, invalid (the caller's mistake), overloaded (shed), unavailable.", "reqps", 12,
		q{`sum by (outcome) (rate(smartfeed_feed_requests_total{` + ns + `}[$__rate_interval]))`, "{{outcome}}"})
	b.panel("timeseries", "GetFeed error ratio", "Share of calls failing (unavailable or overloaded) among calls not invalid: the availability SLI.", "percentunit", 12,
		q{`(sum(rate(smartfeed_feed_requests_total{` + ns + `,outcome=~"unavailable|overloaded"}[$__rate_interval])) or 0 * ` + notInvalid + `) / ` + notInvalid, "errors"})
	b.panel("timeseries", "GetFeed latency", "Answered calls, from smartfeed_feed_request_seconds.", "s", 12,
		q{`histogram_quantile(0.5, sum by (le) (rate(smartfeed_feed_request_seconds_bucket{` + ns + `}[$__rate_interval])))`, "p50"},
		q{`histogram_quantile(0.99, sum by (le) (rate(smartfeed_feed_request_seconds_bucket{` + ns + `}[$__rate_interval])))`, "p99"},
		q{`histogram_quantile(0.999, sum by (le) (rate(smartfeed_feed_request_seconds_bucket{` + ns + `}[$__rate_interval])))`, "p99.9"})
	b.panel("timeseries", "First page p99 by path", "A whole first page by how its fresh chunk came: prepared ahead, generated in the call, or recent (no new chunk owed).", "s", 12,
		q{`histogram_quantile(0.99, sum by (stage, le) (rate(smartfeed_feed_stage_seconds_bucket{` + ns + `,stage=~"page_prepared|page_generated|page_recent"}[$__rate_interval])))`, "{{stage}}"})
	b.row("Fresh chunks")
	b.panel("timeseries", "Pages by fresh status", "smartfeed_feed_requests_total of answered calls by fresh status: included, empty, recent, not_first_page, or a failure (generator_error, generator_timeout, persist_failed, primary_down).", "reqps", 12,
		q{`sum by (fresh) (rate(smartfeed_feed_requests_total{` + ns + `,outcome="ok"}[$__rate_interval]))`, "{{fresh}}"})
	b.panel("timeseries", "Generator calls abandoned", "Generator calls past their deadline, and fresh chunks not served because they could not be recorded.", "ops", 12,
		q{`sum(rate(smartfeed_feed_generator_late_total{` + ns + `}[$__rate_interval]))`, "generator late"},
		q{`sum(rate(smartfeed_feed_persist_failed_total{` + ns + `}[$__rate_interval]))`, "persist failed"})
	b.row("Hedged reads and the standby")
	b.panel("timeseries", "Hedged reads", "Reads started, hedges sent to the standby by reason, hedges the standby won, cutoffs with no budget left.", "ops", 12,
		q{`sum(rate(smartfeed_hedge_calls_total{` + ns + `}[$__rate_interval]))`, "reads"},
		q{`sum by (reason) (rate(smartfeed_hedge_issued_total{` + ns + `}[$__rate_interval]))`, "hedged: {{reason}}"},
		q{`sum(rate(smartfeed_hedge_won_total{` + ns + `}[$__rate_interval]))`, "standby won"},
		q{`sum(rate(smartfeed_hedge_budget_exhausted_total{` + ns + `}[$__rate_interval]))`, "budget exhausted"})
	b.panel("timeseries", "Standby share of pages", "Pages answered by the standby (stale by up to the replication lag) over all pages.", "percentunit", 12,
		q{`sum(rate(smartfeed_feed_served_from_total{` + ns + `,store="standby"}[$__rate_interval])) / sum(rate(smartfeed_feed_served_from_total{` + ns + `}[$__rate_interval]))`, "standby"})
	b.panel("timeseries", "Hedging cutoff", "The cutoff last used by each feedsvc.", "s", 12,
		q{`max by (pod) (smartfeed_hedge_cutoff_seconds{` + ns + `})`, "{{pod}}"})
	b.panel("timeseries", "Primary breaker", "0 closed, 1 open (reads go to the standby), 2 half-open.", "none", 12,
		q{`max by (pod) (smartfeed_hedge_breaker_state{` + ns + `})`, "{{pod}}"})
	return b.d
}

func pipeline() Dashboard {
	b := newDashboard("smartfeed-pipeline", "SmartFeed / Pipeline", "From a pin's creation to followers' pools: events, fanout lag, queues, pool inserts.")
	b.row("Events and fanout")
	b.panel("timeseries", "Tasks enqueued by type", "pinlater_tasks_enqueued_total: fanout tasks are pin events; materialize, upkeep and the rest follow from them.", "ops", 12,
		q{`sum by (type) (rate(pinlater_tasks_enqueued_total{` + ns + `}[$__rate_interval]))`, "{{type}}"})
	b.panel("timeseries", "Fanout lag", "From a pin's creation to the end of the fanout task that delivered it to a follower's pool (smartfeed_worker_fanout_delay_seconds).", "s", 12,
		q{`histogram_quantile(0.5, sum by (le) (rate(smartfeed_worker_fanout_delay_seconds_bucket{` + ns + `}[$__rate_interval])))`, "p50"},
		q{`histogram_quantile(0.99, sum by (le) (rate(smartfeed_worker_fanout_delay_seconds_bucket{` + ns + `}[$__rate_interval])))`, "p99"})
	b.panel("timeseries", "Pool inserts", "Pins written into followers' pools, and fanout chunk tasks of large follower lists.", "ops", 12,
		q{`sum(rate(smartfeed_worker_pool_inserts_total{` + ns + `}[$__rate_interval]))`, "pool inserts"},
		q{`sum(rate(smartfeed_worker_fanout_chunks_enqueued_total{` + ns + `}[$__rate_interval]))`, "fanout chunks"})
	b.panel("timeseries", "Worker tasks done by type", "smartfeed_worker_tasks_done_total.", "ops", 12,
		q{`sum by (type) (rate(smartfeed_worker_tasks_done_total{` + ns + `}[$__rate_interval]))`, "{{type}}"})
	b.row("Queues")
	b.panel("timeseries", "Queue size by state", "pinlater_queue_size, read from Redis at each scrape (the same in every pod: the max is shown).", "short", 12,
		q{`max by (queue, state) (pinlater_queue_size{` + ns + `,state!="dead"})`, "{{queue}} {{state}}"})
	b.panel("timeseries", "Oldest pending task", "pinlater_queue_latency_seconds: how long the oldest pending task of each queue has waited.", "s", 12,
		q{`max by (queue) (pinlater_queue_latency_seconds{` + ns + `})`, "{{queue}}"})
	b.panel("timeseries", "Dead tasks", "Tasks out of retries (smartfeed jobs lists and retries them).", "short", 12,
		q{`max by (queue) (pinlater_queue_size{` + ns + `,state="dead"})`, "{{queue}}"})
	b.panel("timeseries", "Task runs", "Succeeded and failed runs, and time in queue p99.", "ops", 12,
		q{`sum by (queue) (rate(pinlater_tasks_processed_total{` + ns + `}[$__rate_interval]))`, "{{queue}} ok"},
		q{`sum by (queue) (rate(pinlater_tasks_failed_total{` + ns + `}[$__rate_interval]))`, "{{queue}} failed"})
	b.panel("timeseries", "Time in queue p99", "pinlater_task_queue_latency_seconds: from enqueue (or due time) to the start of a run.", "s", 12,
		q{`histogram_quantile(0.99, sum by (queue, le) (rate(pinlater_task_queue_latency_seconds_bucket{` + ns + `}[$__rate_interval])))`, "{{queue}}"})
	b.panel("timeseries", "Outbox", "Tasks recorded in the outbox, relayed by the relay, and rows overdue (not in Redis past their grace).", "short", 12,
		q{`sum(rate(pinlater_outbox_written_total{` + ns + `}[$__rate_interval]))`, "written/s"},
		q{`sum(rate(pinlater_outbox_relayed_total{` + ns + `}[$__rate_interval]))`, "relayed/s"},
		q{`max(pinlater_outbox_overdue{` + ns + `})`, "overdue"})
	b.row("Generator")
	b.panel("timeseries", "Chunks and pins", "Chunks generated and pins put into them by source.", "ops", 12,
		q{`sum(rate(smartfeed_generator_chunks_total{` + ns + `}[$__rate_interval]))`, "chunks"},
		q{`sum by (source) (rate(smartfeed_generator_pins_total{` + ns + `}[$__rate_interval]))`, "pins: {{source}}"})
	b.panel("timeseries", "Generator stage p99", "smartfeed_generator_stage_seconds by stage.", "s", 12,
		q{`histogram_quantile(0.99, sum by (stage, le) (rate(smartfeed_generator_stage_seconds_bucket{` + ns + `}[$__rate_interval])))`, "{{stage}}"})
	return b.d
}

func storage() Dashboard {
	b := newDashboard("smartfeed-storage", "SmartFeed / Storage", "The feed stores (primary and standby), replication, the join cache and the embedded Pebble stores.")
	b.row("Feed stores")
	b.panel("timeseries", "Read latency by store", "smartfeed_hedge_read_seconds: each feed read by the store that served it (primary, standby).", "s", 12,
		q{`histogram_quantile(0.99, sum by (store, le) (rate(smartfeed_hedge_read_seconds_bucket{` + ns + `}[$__rate_interval])))`, "p99 {{store}}"},
		q{`histogram_quantile(0.5, sum by (store, le) (rate(smartfeed_hedge_read_seconds_bucket{` + ns + `}[$__rate_interval])))`, "p50 {{store}}"})
	b.panel("timeseries", "Pages by store", "smartfeed_feed_served_from_total by store.", "ops", 12,
		q{`sum by (store) (rate(smartfeed_feed_served_from_total{` + ns + `}[$__rate_interval]))`, "{{store}}"})
	b.panel("timeseries", "Replication lag", "How far the standby is behind the primary (smartfeed_replication_lag_seconds).", "s", 12,
		q{`max by (pod) (smartfeed_replication_lag_seconds{` + ns + `})`, "{{pod}}"})
	b.panel("timeseries", "Standby applies", "Change-log entries applied to the standby, and failed applies or reads retried (application replication).", "ops", 12,
		q{`sum(rate(smartfeed_feed_replication_applied_total{` + ns + `}[$__rate_interval]))`, "applied"},
		q{`sum(rate(smartfeed_feed_replication_retries_total{` + ns + `}[$__rate_interval]))`, "retried"})
	b.row("Pebble (embedded stores)")
	b.panel("timeseries", "Read amplification by store", "smartfeed_pebble_read_amp.", "short", 12,
		q{`max by (store) (smartfeed_pebble_read_amp{` + ns + `})`, "{{store}}"})
	b.panel("timeseries", "Compaction debt by store", "smartfeed_pebble_compaction_debt_bytes.", "bytes", 12,
		q{`max by (store) (smartfeed_pebble_compaction_debt_bytes{` + ns + `})`, "{{store}}"})
	b.panel("timeseries", "Write amplification by store", "Bytes flushes and compactions wrote per byte written to the WAL; compacted bytes are what compactions spend their CPU on.", "short", 12,
		q{`sum by (store) (rate(smartfeed_pebble_flushed_bytes_total{` + ns + `}[$__rate_interval]) + rate(smartfeed_pebble_compacted_bytes_total{` + ns + `}[$__rate_interval])) / sum by (store) (rate(smartfeed_pebble_wal_bytes_total{` + ns + `}[$__rate_interval]))`, "{{store}}"})
	b.panel("timeseries", "Write stalls by store", "Time writes spent stalled, per second.", "percentunit", 12,
		q{`sum by (store) (rate(smartfeed_pebble_write_stall_seconds_total{` + ns + `}[$__rate_interval]))`, "{{store}}"})
	b.panel("timeseries", "Memtables by store", "smartfeed_pebble_memtable_bytes.", "bytes", 12,
		q{`max by (store) (smartfeed_pebble_memtable_bytes{` + ns + `})`, "{{store}}"})
	b.row("Process")
	b.panel("timeseries", "Resident memory", "process_resident_memory_bytes of each pod.", "bytes", 12,
		q{`max by (pod) (process_resident_memory_bytes{` + ns + `})`, "{{pod}}"})
	b.panel("timeseries", "Goroutines", "go_goroutines of each pod.", "short", 12,
		q{`max by (pod) (go_goroutines{` + ns + `})`, "{{pod}}"})
	return b.d
}

func slo() Dashboard {
	b := newDashboard("smartfeed-slo", "SmartFeed / SLO", "GetFeed's objectives: 99.99% of calls without an error, 99% of first pages with the fresh chunk they were owed, p99 under the latency objective. From the recording rules of the chart's PrometheusRule.")
	b.row("Availability (objective 99.99%)")
	b.panel("stat", "Availability, 30 days", "Share of GetFeed calls without an error over 30 days.", "percentunit", 8,
		q{`smartfeed:getfeed_availability:ratio_rate30d{` + ns + `}`, "{{namespace}}"})
	b.panel("stat", "Error budget left, 30 days", "1 - (errors / allowed errors): 100% untouched, 0% spent, negative overspent.", "percentunit", 8,
		q{`1 - (1 - smartfeed:getfeed_availability:ratio_rate30d{` + ns + `}) / 0.0001`, "{{namespace}}"})
	b.panel("stat", "Burn rate, 1 hour", "Error ratio over the budget's ratio: 1 spends the budget in exactly 30 days; the fast alert pages at 14.4.", "short", 8,
		q{`smartfeed:getfeed_errors:ratio_rate1h{` + ns + `} / 0.0001`, "{{namespace}}"})
	b.panel("timeseries", "Burn rate by window", "The windows the alerts read: pages at 14.4 (1h and 5m) and 6 (6h and 30m), tickets at 3 (1d and 2h) and 1 (3d and 6h).", "short", 24,
		q{`smartfeed:getfeed_errors:ratio_rate5m{` + ns + `} / 0.0001`, "5m"},
		q{`smartfeed:getfeed_errors:ratio_rate30m{` + ns + `} / 0.0001`, "30m"},
		q{`smartfeed:getfeed_errors:ratio_rate1h{` + ns + `} / 0.0001`, "1h"},
		q{`smartfeed:getfeed_errors:ratio_rate6h{` + ns + `} / 0.0001`, "6h"},
		q{`smartfeed:getfeed_errors:ratio_rate1d{` + ns + `} / 0.0001`, "1d"},
		q{`smartfeed:getfeed_errors:ratio_rate3d{` + ns + `} / 0.0001`, "3d"})
	b.row("Fresh chunks (objective 99%) and latency")
	b.panel("timeseries", "Fresh chunk missed", "Share of first pages that lost their fresh chunk to a failure.", "percentunit", 12,
		q{`smartfeed:getfeed_fresh_missed:ratio_rate5m{` + ns + `}`, "5m"},
		q{`smartfeed:getfeed_fresh_missed:ratio_rate1h{` + ns + `}`, "1h"})
	b.panel("timeseries", "p99 against the objective", "GetFeed p99 and the latency objective (observability.latencyObjectiveSeconds).", "s", 12,
		q{`smartfeed:getfeed_latency_seconds:p99_rate5m{` + ns + `}`, "p99"},
		q{`smartfeed:getfeed_latency_objective_seconds`, "objective"})
	return b.d
}

// Marshal is a dashboard's JSON as the chart ships it: indented, ending in a newline.
func Marshal(d Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", d.UID, err)
	}
	return append(b, '\n'), nil
}

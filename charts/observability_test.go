package charts_test

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// monitoringDocs renders the chart with args and returns its documents of the given kind,
// decoded loosely (the Prometheus Operator's types are not in k8s.io/api).
func monitoringDocs(t *testing.T, kind string, args ...string) []map[string]any {
	t.Helper()
	out, err := helm(append([]string{"template", "rel", "smartfeed"}, args...)...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	var docs []map[string]any
	for doc := range strings.SplitSeq(string(out), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if m != nil && m["kind"] == kind {
			docs = append(docs, m)
		}
	}
	return docs
}

var observabilityOn = []string{"--set", "observability.prometheusRule.enabled=true,observability.serviceMonitor.enabled=true,observability.dashboards.enabled=true"}

// TestObservabilityOffByDefault: without the flags the chart renders no PrometheusRule, no
// ServiceMonitor and no dashboard ConfigMap (clusters without the operator's CRDs install it).
func TestObservabilityOffByDefault(t *testing.T) {
	for _, kind := range []string{"PrometheusRule", "ServiceMonitor"} {
		if d := monitoringDocs(t, kind); len(d) != 0 {
			t.Errorf("default values render %d %s", len(d), kind)
		}
	}
	for _, cm := range monitoringDocs(t, "ConfigMap") {
		if strings.Contains(cm["metadata"].(map[string]any)["name"].(string), "dashboard") {
			t.Errorf("default values render dashboard ConfigMap %v", cm["metadata"])
		}
	}
}

// TestPrometheusRuleIsTheRulesFile: the PrometheusRule's groups are files/prometheus/rules.yaml's
// (the file promtool tests), with only the latency objective taken from the values.
func TestPrometheusRuleIsTheRulesFile(t *testing.T) {
	raw, err := os.ReadFile("smartfeed/files/prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal([]byte(strings.Replace(string(raw), "expr: vector(0.25)", "expr: vector(0.4)", 1)), &want); err != nil {
		t.Fatal(err)
	}
	docs := monitoringDocs(t, "PrometheusRule", append(observabilityOn, "--set", "observability.latencyObjectiveSeconds=0.4")...)
	if len(docs) != 1 {
		t.Fatalf("rendered %d PrometheusRules, want 1", len(docs))
	}
	if got := docs[0]["spec"]; !reflect.DeepEqual(got, want) {
		t.Errorf("PrometheusRule spec differs from files/prometheus/rules.yaml (objective 0.4):\n got %v\nwant %v", got, want)
	}
}

// TestServiceMonitors: one per component, scraping the admin container port, over HTTPS when
// the chart's TLS is on.
func TestServiceMonitors(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		scheme any
	}{
		{observabilityOn, "https"},
		{append([]string{"--set", "tls.existingSecret=,auth.insecure=true,auth.existingSecret="}, observabilityOn...), nil},
	} {
		docs := monitoringDocs(t, "ServiceMonitor", tc.args...)
		if len(docs) != len(components) {
			t.Fatalf("%v: rendered %d ServiceMonitors, want %d", tc.args, len(docs), len(components))
		}
		for _, d := range docs {
			ep := d["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
			if ep["targetPort"] != "admin" || ep["path"] != "/metrics" || ep["scheme"] != tc.scheme {
				t.Errorf("%v: %v endpoint %v, want targetPort admin, path /metrics, scheme %v", tc.args, d["metadata"], ep, tc.scheme)
			}
		}
	}
}

// TestDashboardConfigMaps: each dashboard of files/dashboards is a ConfigMap with the Grafana
// sidecar's label, holding the file's JSON unchanged.
func TestDashboardConfigMaps(t *testing.T) {
	out, err := helm(append([]string{"template", "rel", "smartfeed"}, observabilityOn...)...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	n := 0
	for doc := range strings.SplitSeq(string(out), "\n---") {
		var cm corev1.ConfigMap
		if !strings.Contains(doc, "grafana_dashboard") {
			continue
		}
		decode(t, doc, &cm)
		if cm.Labels["grafana_dashboard"] != "1" {
			t.Errorf("%s: label grafana_dashboard = %q, want \"1\"", cm.Name, cm.Labels["grafana_dashboard"])
		}
		for file, body := range cm.Data {
			want, err := os.ReadFile("smartfeed/files/dashboards/" + file)
			if err != nil {
				t.Fatalf("%s: %v", cm.Name, err)
			}
			if body != strings.TrimSuffix(string(want), "\n") {
				t.Errorf("%s: %s differs from the file", cm.Name, file)
			}
			var d struct {
				UID    string `json:"uid"`
				Panels []any  `json:"panels"`
			}
			if err := json.Unmarshal([]byte(body), &d); err != nil || d.UID == "" || len(d.Panels) == 0 {
				t.Errorf("%s: %s is not a dashboard: %v", cm.Name, file, err)
			}
			n++
		}
	}
	if n != 4 {
		t.Errorf("rendered %d dashboards, want 4 (feed serving, pipeline, storage, SLO)", n)
	}
}

// TestTracingEnv: tracing is off by default (no OTEL_* variable); observability.tracing.enabled
// sets the exporter, the endpoint and the sampler on every component, and refuses to render
// without an endpoint.
func TestTracingEnv(t *testing.T) {
	otel := func(m manifests, c string) map[string]string {
		env := map[string]string{}
		for _, e := range m.deployments["rel-smartfeed-"+c].Spec.Template.Spec.Containers[0].Env {
			if strings.HasPrefix(e.Name, "OTEL_") {
				env[e.Name] = e.Value
			}
		}
		return env
	}
	off := render(t)
	on := render(t, "--set", "observability.tracing.enabled=true,observability.tracing.endpoint=http://collector:4317")
	for _, c := range components {
		if env := otel(off, c); len(env) != 0 {
			t.Errorf("%s: default values set %v", c, env)
		}
		want := map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01",
			"OTEL_RESOURCE_ATTRIBUTES": "k8s.namespace.name=default"}
		if got := otel(on, c); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: tracing env %v, want %v", c, got, want)
		}
	}
	out, err := helm("template", "rel", "smartfeed", "--set", "observability.tracing.enabled=true")
	if err == nil || !strings.Contains(string(out), "observability.tracing.endpoint is required") {
		t.Errorf("tracing on without an endpoint: err %v, output %s; want it refused", err, out)
	}
}

// Package charts_test renders the smartfeed Helm chart with the pinned helm (go tool helm) and
// decodes every manifest strictly into its Kubernetes API type, so a misspelled or misplaced
// field fails here instead of at kubectl apply.
package charts_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// manifests is a rendered release, decoded.
type manifests struct {
	deployments map[string]appsv1.Deployment
	services    map[string]corev1.Service
	configMaps  map[string]corev1.ConfigMap
	hpas        map[string]autoscalingv2.HorizontalPodAutoscaler
	pdbs        map[string]policyv1.PodDisruptionBudget
	netpols     map[string]networkingv1.NetworkPolicy
}

// render runs helm template on the chart with extra args and decodes the output strictly.
func render(t *testing.T, args ...string) manifests {
	t.Helper()
	out, err := helm(append([]string{"template", "rel", "smartfeed"}, args...)...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	m := manifests{map[string]appsv1.Deployment{}, map[string]corev1.Service{}, map[string]corev1.ConfigMap{},
		map[string]autoscalingv2.HorizontalPodAutoscaler{}, map[string]policyv1.PodDisruptionBudget{},
		map[string]networkingv1.NetworkPolicy{}}
	for i, doc := range strings.Split(string(out), "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		switch head.Kind {
		case "Deployment":
			var d appsv1.Deployment
			decode(t, doc, &d)
			m.deployments[head.Metadata.Name] = d
		case "Service":
			var s corev1.Service
			decode(t, doc, &s)
			m.services[head.Metadata.Name] = s
		case "ConfigMap":
			var c corev1.ConfigMap
			decode(t, doc, &c)
			m.configMaps[head.Metadata.Name] = c
		case "HorizontalPodAutoscaler":
			var h autoscalingv2.HorizontalPodAutoscaler
			decode(t, doc, &h)
			m.hpas[head.Metadata.Name] = h
		case "PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			decode(t, doc, &p)
			m.pdbs[head.Metadata.Name] = p
		case "NetworkPolicy":
			var n networkingv1.NetworkPolicy
			decode(t, doc, &n)
			m.netpols[head.Metadata.Name] = n
		default:
			t.Fatalf("document %d: unexpected kind %q", i, head.Kind)
		}
	}
	return m
}

func decode(t *testing.T, doc string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
		t.Fatalf("strict decode into %T: %v\n%s", into, err, doc)
	}
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func helm(args ...string) ([]byte, error) {
	cmd := exec.Command("go", append([]string{"tool", "helm"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

var components = []string{"worker", "generator", "feedsvc", "graph"}

func TestLint(t *testing.T) {
	for _, args := range [][]string{nil, {"-f", "smartfeed/ci/hbase-values.yaml"}} {
		if out, err := helm(append([]string{"lint", "--strict", "smartfeed"}, args...)...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", args, err, out)
		}
	}
}

// TestHBaseValues renders with distinct quorums per store and checks that the four
// Deployments run their role over a config that names those quorums.
func TestHBaseValues(t *testing.T) {
	m := render(t, "-f", "smartfeed/ci/hbase-values.yaml")
	if n := len(components); len(m.deployments) != n || len(m.services) != n || len(m.hpas) != n || len(m.pdbs) != n || len(m.configMaps) != 1 {
		t.Fatalf("rendered %d deployments, %d services, %d HPAs, %d PDBs, %d config maps; want %d of each and 1",
			len(m.deployments), len(m.services), len(m.hpas), len(m.pdbs), len(m.configMaps), n)
	}
	cm, ok := m.configMaps["rel-smartfeed"]
	if !ok {
		t.Fatalf("no ConfigMap rel-smartfeed")
	}
	var cfg struct {
		Storage struct {
			Backend string `json:"backend"`
			HBase   struct {
				PoolsZK     string `json:"pools_zk"`
				PrimaryZK   string `json:"primary_zk"`
				StandbyZK   string `json:"standby_zk"`
				TablePrefix string `json:"table_prefix"`
			} `json:"hbase"`
		} `json:"storage"`
		Redis struct {
			Addr, Namespace string
		} `json:"redis"`
		Feed struct {
			Hedge struct {
				Mode   string  `json:"mode"`
				Delay  string  `json:"delay"`
				Budget float64 `json:"budget"`
			} `json:"hedge"`
		} `json:"feed"`
	}
	raw := cm.Data["config.json"]
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("config.json: %v\n%s", err, raw)
	}
	h := cfg.Storage.HBase
	if cfg.Storage.Backend != "hbase" || h.PoolsZK != "zk-pools-0:2181,zk-pools-1:2181,zk-pools-2:2181" ||
		h.PrimaryZK != "zk-feed-a-0:2181,zk-feed-a-1:2181" || h.StandbyZK != "zk-feed-b-0:2181" || h.TablePrefix != "prod_" {
		t.Errorf("storage in config.json = %+v, want the quorums of ci/hbase-values.yaml", cfg.Storage)
	}
	if cfg.Redis.Addr != "redis-master.queues:6379" || cfg.Redis.Namespace != "prod" {
		t.Errorf("redis in config.json = %+v", cfg.Redis)
	}
	if cfg.Feed.Hedge.Mode != "fixed" || cfg.Feed.Hedge.Delay != "25ms" || cfg.Feed.Hedge.Budget != 0.05 {
		t.Errorf("hedge in config.json = %+v", cfg.Feed.Hedge)
	}
	checkAcceptedByBinary(t, raw)

	for _, c := range components {
		name := "rel-smartfeed-" + c
		d, ok := m.deployments[name]
		if !ok {
			t.Fatalf("no Deployment %s", name)
		}
		spec := d.Spec.Template.Spec
		if len(spec.Containers) != 1 {
			t.Fatalf("%s: %d containers", name, len(spec.Containers))
		}
		ctr := spec.Containers[0]
		if len(ctr.Args) != 1 || ctr.Args[0] != c {
			t.Errorf("%s: args %q, want [%q]", name, ctr.Args, c)
		}
		if ctr.Image != "ghcr.io/smartfeed/smartfeed:1.2.3" {
			t.Errorf("%s: image %q", name, ctr.Image)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range ctr.Env {
			env[e.Name] = e
		}
		if env["SMARTFEED_CONFIG"].Value != "/etc/smartfeed/config.json" {
			t.Errorf("%s: SMARTFEED_CONFIG = %q", name, env["SMARTFEED_CONFIG"].Value)
		}
		if env["SMARTFEED_WAIT_FOR_DEPS"].Value != "true" {
			t.Errorf("%s: SMARTFEED_WAIT_FOR_DEPS = %q, want true (Redis may start after the pods)", name, env["SMARTFEED_WAIT_FOR_DEPS"].Value)
		}
		if s := env["SMARTFEED_REDIS_PASSWORD"].ValueFrom; s == nil || s.SecretKeyRef == nil || s.SecretKeyRef.Name != "redis-auth" {
			t.Errorf("%s: SMARTFEED_REDIS_PASSWORD not from Secret redis-auth: %+v", name, env["SMARTFEED_REDIS_PASSWORD"])
		}
		gen, hasGen := env["SMARTFEED_GENERATOR_ADDR"]
		if c == "feedsvc" {
			if want := "dns:///rel-smartfeed-generator:9090"; gen.Value != want {
				t.Errorf("feedsvc: SMARTFEED_GENERATOR_ADDR = %q, want %q", gen.Value, want)
			}
		} else if hasGen {
			t.Errorf("%s: has SMARTFEED_GENERATOR_ADDR; only feedsvc calls the generator", name)
		}
		mounted := false
		for _, vm := range ctr.VolumeMounts {
			mounted = mounted || (vm.Name == "config" && vm.MountPath == "/etc/smartfeed")
		}
		cmRef := false
		for _, v := range spec.Volumes {
			cmRef = cmRef || (v.Name == "config" && v.ConfigMap != nil && v.ConfigMap.Name == "rel-smartfeed")
		}
		if !mounted || !cmRef {
			t.Errorf("%s: the config map is not mounted at /etc/smartfeed", name)
		}
		rp, lp := ctr.ReadinessProbe, ctr.LivenessProbe
		if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Port.IntValue() != 9091 || rp.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s: readiness is not an HTTPS probe of /readyz on the admin port: %+v", name, rp)
		}
		if lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/healthz" || lp.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s: liveness is not an HTTPS probe of /healthz: %+v", name, lp)
		}
		if ctr.Resources.Requests.Cpu().IsZero() || ctr.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: resources missing: %+v", name, ctr.Resources)
		}
		sc := spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: pod may run as root", name)
		}
		sel := d.Spec.Selector.MatchLabels["app.kubernetes.io/component"]
		if sel != c || d.Spec.Template.Labels["app.kubernetes.io/component"] != c {
			t.Errorf("%s: selector component %q", name, sel)
		}
		svc := m.services[name]
		if svc.Spec.Selector["app.kubernetes.io/component"] != c || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9090 {
			t.Errorf("%s: service does not select the component on 9090: %+v", name, svc.Spec)
		}
		if hpa := m.hpas[name]; hpa.Spec.ScaleTargetRef.Name != name || hpa.Spec.MaxReplicas < *hpa.Spec.MinReplicas {
			t.Errorf("%s: HPA %+v", name, hpa.Spec)
		}
		if pdb := m.pdbs[name]; pdb.Spec.Selector == nil || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != c {
			t.Errorf("%s: PDB does not select the component", name)
		}
	}
}

// checkAcceptedByBinary runs `smartfeed config` on the rendered config.json, so the chart and
// the binary cannot drift apart (unknown fields are refused there).
func checkAcceptedByBinary(t *testing.T, raw string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./cmd/smartfeed", "config", "--config", path)
	cmd.Dir = ".."
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("smartfeed config refuses the rendered config.json: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"primary_zk": "zk-feed-a-0:2181,zk-feed-a-1:2181"`) {
		t.Errorf("smartfeed config did not print the rendered quorums:\n%s", out)
	}
}

// cleanEnv drops SMARTFEED_* variables, which would override the file under test.
func cleanEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SMARTFEED_") {
			env = append(env, e)
		}
	}
	return env
}

func TestDefaults(t *testing.T) {
	m := render(t)
	if len(m.deployments) != len(components) {
		t.Fatalf("%d deployments, want %d", len(m.deployments), len(components))
	}
	for _, c := range components {
		d := m.deployments["rel-smartfeed-"+c]
		if d.Spec.Replicas != nil {
			t.Errorf("%s: replicas set while the HPA owns them", c)
		}
	}
}

func TestNoAutoscaling(t *testing.T) {
	m := render(t, "--set", "worker.autoscaling.enabled=false", "--set", "worker.replicas=4", "--set", "feedsvc.pdb.enabled=false")
	if r := m.deployments["rel-smartfeed-worker"].Spec.Replicas; r == nil || *r != 4 {
		t.Errorf("worker replicas = %v, want 4", r)
	}
	if _, ok := m.hpas["rel-smartfeed-worker"]; ok {
		t.Error("worker HPA rendered while disabled")
	}
	if _, ok := m.pdbs["rel-smartfeed-feedsvc"]; ok {
		t.Error("feedsvc PDB rendered while disabled")
	}
}

func TestRefusesBadValues(t *testing.T) {
	for _, tt := range []struct {
		set, want string
	}{
		{"storage.backend=pebble", "storage.backend must be hbase"},
		{"storage.hbase.standbyZK=", "standbyZK are all required"},
	} {
		out, err := helm("template", "rel", "smartfeed", "--set", tt.set)
		if err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("--set %s: err %v, output %s; want a failure naming %q", tt.set, err, out, tt.want)
		}
	}
}

// TestSecurity: the config turns authentication on with the Secret's files, FeedAdmin listens
// on the pod's loopback, pprof is off, the Secret is mounted, and each component admits only
// its callers: frontends to feedsvc, frontends and producers to the graph role, feedsvc alone
// to the generator, nobody to the worker's gRPC port, the monitoring namespace to every admin
// port. Without a Secret (and without
// auth.insecure) the chart refuses to render.
func TestSecurity(t *testing.T) {
	m := render(t)
	var cfg struct {
		Auth struct {
			JWKSFile string `json:"jwks_file"`
			Insecure bool   `json:"insecure"`
		} `json:"auth"`
		Admin struct {
			GRPCAddr  string `json:"grpc_addr"`
			TokenFile string `json:"token_file"`
			Pprof     bool   `json:"pprof"`
		} `json:"admin"`
		Generator struct {
			TokenFile string `json:"token_file"`
			CAFile    string `json:"ca_file"`
		} `json:"generator"`
		TLS struct {
			CertFile     string `json:"cert_file"`
			KeyFile      string `json:"key_file"`
			ClientCAFile string `json:"client_ca_file"`
		} `json:"tls"`
	}
	raw := m.configMaps["rel-smartfeed"].Data["config.json"]
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Auth.JWKSFile != "/etc/smartfeed-auth/jwks.json" || cfg.Auth.Insecure || cfg.Admin.GRPCAddr != "127.0.0.1:9092" ||
		cfg.Admin.TokenFile != "/etc/smartfeed-auth/admin-token" || cfg.Admin.Pprof || cfg.Generator.TokenFile != "/etc/smartfeed-auth/generator-token" {
		t.Errorf("security config: %+v", cfg)
	}
	if cfg.TLS.CertFile != "/etc/smartfeed-tls/tls.crt" || cfg.TLS.KeyFile != "/etc/smartfeed-tls/tls.key" || cfg.TLS.ClientCAFile != "" ||
		cfg.Generator.CAFile != "/etc/smartfeed-tls/ca.crt" {
		t.Errorf("tls config: %+v, generator CA %q", cfg.TLS, cfg.Generator.CAFile)
	}
	for _, c := range components {
		d := m.deployments["rel-smartfeed-"+c]
		mounted, tlsMounted := false, false
		for _, vm := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
			mounted = mounted || (vm.Name == "auth" && vm.MountPath == "/etc/smartfeed-auth")
			tlsMounted = tlsMounted || (vm.Name == "tls" && vm.MountPath == "/etc/smartfeed-tls")
		}
		if !tlsMounted {
			t.Errorf("%s: the TLS Secret is not mounted", c)
		}
		secret := false
		for _, v := range d.Spec.Template.Spec.Volumes {
			secret = secret || (v.Name == "auth" && v.Secret != nil && v.Secret.SecretName == "smartfeed-auth")
		}
		if !mounted || !secret {
			t.Errorf("%s: the auth Secret is not mounted", c)
		}
		np, ok := m.netpols["rel-smartfeed-"+c]
		if !ok {
			t.Fatalf("%s: no NetworkPolicy", c)
		}
		grpcRules := 1
		if c == "worker" {
			grpcRules = 0
		}
		if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] != c || len(np.Spec.Ingress) != grpcRules+1 {
			t.Fatalf("%s: NetworkPolicy %+v", c, np.Spec)
		}
		admin := np.Spec.Ingress[grpcRules]
		if len(admin.Ports) != 1 || admin.Ports[0].Port.IntValue() != 9091 || len(admin.From) != 1 || admin.From[0].NamespaceSelector == nil {
			t.Errorf("%s: the last ingress rule is not the monitoring namespace to the admin port: %+v", c, admin)
		}
		if grpcRules == 0 {
			continue
		}
		if p := np.Spec.Ingress[0].Ports; len(p) != 1 || p[0].Port.IntValue() != 9090 {
			t.Errorf("%s: first ingress rule is not the gRPC port: %+v", c, p)
		}
		var from []string
		for _, p := range np.Spec.Ingress[0].From {
			if p.PodSelector != nil {
				for k, v := range p.PodSelector.MatchLabels {
					if k == "app.kubernetes.io/part-of" || k == "app.kubernetes.io/component" {
						from = append(from, v)
					}
				}
			}
		}
		want := map[string]string{"feedsvc": "frontend", "graph": "frontend producer", "generator": "feedsvc"}[c]
		if strings.Join(from, " ") != want {
			t.Errorf("%s: gRPC port open to %v, want %s", c, from, want)
		}
	}
	if out, err := helm("template", "rel", "smartfeed", "--set", "auth.existingSecret="); err == nil || !strings.Contains(string(out), "auth.existingSecret is required") {
		t.Errorf("no auth Secret: rendered anyway (%v)\n%.300s", err, out)
	}
	if out, err := helm("template", "rel", "smartfeed", "--set", "tls.existingSecret="); err == nil || !strings.Contains(string(out), "tls.existingSecret is required") {
		t.Errorf("no TLS Secret: rendered anyway (%v)\n%.300s", err, out)
	}
	// mTLS between roles.
	mt := render(t, "--set", "tls.mutual=true")
	if raw := mt.configMaps["rel-smartfeed"].Data["config.json"]; !strings.Contains(raw, `"client_ca_file": "/etc/smartfeed-tls/ca.crt"`) {
		t.Errorf("tls.mutual: no client CA in the config:\n%s", raw)
	}
}

// TestSentinelValues renders for an existing Redis Sentinel service: config.json names the mode,
// the master and the sentinels (and the binary accepts it), and every Deployment takes both
// passwords from their Secrets.
func TestSentinelValues(t *testing.T) {
	m := render(t, "-f", "smartfeed/ci/sentinel-values.yaml")
	cm, ok := m.configMaps["rel-smartfeed"]
	if !ok {
		t.Fatalf("no ConfigMap rel-smartfeed")
	}
	var cfg struct {
		Redis struct {
			Mode           string `json:"mode"`
			SentinelMaster string `json:"sentinel_master"`
			SentinelAddrs  string `json:"sentinel_addrs"`
		} `json:"redis"`
	}
	raw := cm.Data["config.json"]
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("config.json: %v\n%s", err, raw)
	}
	if r := cfg.Redis; r.Mode != "sentinel" || r.SentinelMaster != "mymaster" ||
		r.SentinelAddrs != "redis-sentinel-0.queues:26379,redis-sentinel-1.queues:26379,redis-sentinel-2.queues:26379" {
		t.Errorf("redis in config.json = %+v", r)
	}
	checkAcceptedByBinary(t, raw)
	for _, c := range components {
		name := "rel-smartfeed-" + c
		d, ok := m.deployments[name]
		if !ok {
			t.Fatalf("no Deployment %s", name)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e
		}
		for v, secret := range map[string]string{"SMARTFEED_REDIS_PASSWORD": "redis-auth", "SMARTFEED_REDIS_SENTINEL_PASSWORD": "redis-sentinel-auth"} {
			if s := env[v].ValueFrom; s == nil || s.SecretKeyRef == nil || s.SecretKeyRef.Name != secret {
				t.Errorf("%s: %s not from Secret %s: %+v", name, v, secret, env[v])
			}
		}
	}
}

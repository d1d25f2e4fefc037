#!/usr/bin/env bash
# kubeconform.sh: renders charts/smartfeed with the pinned helm for each values set the chart
# supports (the defaults, charts/smartfeed/ci/*.yaml, and auth.insecure without Secrets) and
# validates every manifest against the Kubernetes OpenAPI JSON schemas of K8S_VERSION (default
# 1.33.0) with kubeconform -strict (unknown fields refused), offline.
#
# The schemas come from PyPI's kubernetes-validate (pinned below; its wheel bundles the
# "-local-strict" schemas of every Kubernetes minor), downloaded once into run/k8s-schemas;
# kubeconform is run through the Go module proxy (pinned). Nothing else is fetched.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GO="${GO:-go}"
K8S_VERSION="${K8S_VERSION:-1.33.0}"
KUBECONFORM=github.com/yannh/kubeconform/cmd/kubeconform@v0.7.0
SCHEMAS_PKG=kubernetes-validate==1.37.0
cache="$RUN_DIR/k8s-schemas"
schemas="$cache/v$K8S_VERSION-local-strict"

if [ ! -d "$schemas" ]; then
	mkdir -p "$cache"
	log "downloading the Kubernetes JSON schemas ($SCHEMAS_PKG from PyPI)"
	python3 -m pip download --quiet --no-deps --dest "$cache" "$SCHEMAS_PKG" >&2 \
		|| die "pip download $SCHEMAS_PKG failed"
	python3 - "$cache" "v$K8S_VERSION-local-strict" <<'PY'
import glob, json, os, sys, zipfile
cache, want = sys.argv[1], sys.argv[2]
whl = sorted(glob.glob(os.path.join(cache, "kubernetes_validate-*.whl")))[-1]
prefix = "kubernetes_validate/kubernetes-json-schema/" + want + "/"
n = 0
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.startswith(prefix) and name.endswith(".json"):
            dst = os.path.join(cache, want, name[len(prefix):])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            # Each schema's $id is a kubernetes.io URL its references resolve against: without
            # it, and with the references relative, they resolve to the files beside it.
            doc = json.loads(z.read(name).replace(b'"/api/_definitions.json#', b'"_definitions.json#'))
            doc.pop("$id", None)
            with open(dst, "w") as f:
                json.dump(doc, f)
            n += 1
if n == 0:
    sys.exit("no schemas for %s in %s" % (want, whl))
print("%d schemas in %s" % (n, os.path.join(cache, want)), file=sys.stderr)
PY
fi

out="$RUN_DIR/k8s-manifests"
rm -rf "$out"
mkdir -p "$out"
render() {
	local name="$1"
	shift
	(cd "$ROOT/charts" && "$GO" tool helm template smartfeed smartfeed --namespace smartfeed "$@") >"$out/$name.yaml"
}
render defaults
for f in "$ROOT"/charts/smartfeed/ci/*.yaml; do
	render "ci-$(basename "$f" .yaml)" -f "$f"
done
render insecure --set auth.existingSecret= --set tls.existingSecret= --set auth.insecure=true
render mtls --set tls.mutual=true

log "kubeconform -strict, Kubernetes $K8S_VERSION, on $(ls "$out" | tr '\n' ' ')"
GOFLAGS=-mod=mod "$GO" run "$KUBECONFORM" -strict -summary -kubernetes-version "$K8S_VERSION" \
	-schema-location "$cache/{{ .NormalizedKubernetesVersion }}-local-strict/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
	"$out"/*.yaml

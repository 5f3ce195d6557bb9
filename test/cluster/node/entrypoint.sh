#!/bin/bash
# The node container's init (under tini): prepares what a privileged
# container would have had, then runs the node's daemons under a small
# supervisor that restarts any of them that exits (a kubelet restart is a
# `pkill -x kubelet`). Its settings come from the environment that
# test/cluster gives `docker run`; its certificates and kubeconfigs from
# /etc/kubernetes (a read-only bind mount of the node's PKI directory).
set -euo pipefail

: "${NODE_NAME:?}" "${NODE_IP:?}" "${NODE_ROLE:?}" "${API_SERVER:?}" "${CGROUP_ROOT:?}"
: "${CLUSTER_CIDR:?}" "${SERVICE_CIDR:?}" "${CLUSTER_DNS:?}"

logdir=/var/log/tierflow-node
rundir=/run/tierflow-node
mkdir -p "$logdir" "$rundir"

log() { echo "$(date -Is) $*" >>"$logdir/init.log"; }

# A machine ID per node, as a systemd host has (the kubelet reports it).
[[ -s /etc/machine-id ]] || tr -d - </proc/sys/kernel/random/uuid >/etc/machine-id

# Mounts made inside containers (secrets, projected volumes) must reach the
# runtimes and back, as on a systemd host where / is shared.
mount --make-rshared /
# Docker mounts sysfs read-only for an unprivileged container; a node's
# daemons (OVS, the kubelet) write it.
mount -o remount,rw /sys || log "sysfs stays read-only"

# Every node shares the machine's cgroup hierarchy (cgroup v1, bind-mounted):
# the kubelet of each node owns its own subtree, which must exist.
for ctrl in /sys/fs/cgroup/*/; do
  case "$ctrl" in */unified/) continue ;; esac
  mkdir -p "$ctrl${CGROUP_ROOT#/}"
done

sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.ipv6.conf.all.forwarding=1 || true

# supervise NAME CMD...: run CMD forever, its output in $logdir/NAME.log.
supervise() {
  local name=$1
  shift
  (
    trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM
    while true; do
      "$@" >>"$logdir/$name.log" 2>&1 &
      child=$!
      echo "$child" >"$rundir/$name.pid"
      wait "$child" && rc=0 || rc=$?
      log "$name exited with status $rc; restarting in 1s"
      sleep 1
    done
  ) &
  echo $! >"$rundir/$name.supervisor"
}

wait_for() { # wait_for WHAT SECONDS CMD...
  local what=$1 secs=$2
  shift 2
  for _ in $(seq "$secs"); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 1
  done
  log "timed out waiting for $what"
  return 1
}

log "starting $NODE_NAME ($NODE_ROLE, $NODE_IP)"
supervise containerd containerd --config /etc/containerd/config.toml
wait_for containerd 60 ctr --address /run/containerd/containerd.sock version

# Images the cluster provides (pause, agnhost, CoreDNS) are imported by
# test/cluster after start; the kubelet never pulls (there is no registry).

if [[ "$NODE_ROLE" == control-plane ]]; then
  pki=/etc/kubernetes/pki
  supervise etcd etcd --name="$NODE_NAME" --data-dir=/var/lib/etcd \
    --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
    --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
    --initial-cluster="$NODE_NAME=http://127.0.0.1:2380" --unsafe-no-fsync --logger=zap --log-level=warn
  wait_for etcd 60 curl -fsS http://127.0.0.1:2379/health
  supervise kube-apiserver kube-apiserver --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --advertise-address="$NODE_IP" --secure-port=6443 \
    --tls-cert-file=$pki/apiserver.crt --tls-private-key-file=$pki/apiserver.key \
    --client-ca-file=$pki/ca.crt \
    --kubelet-client-certificate=$pki/apiserver-kubelet-client.crt --kubelet-client-key=$pki/apiserver-kubelet-client.key \
    --service-account-key-file=$pki/sa.pub --service-account-signing-key-file=$pki/sa.key \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range="$SERVICE_CIDR" --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction --allow-privileged=true --profiling=false
  wait_for kube-apiserver 120 curl -fsSk https://127.0.0.1:6443/readyz
  supervise kube-controller-manager kube-controller-manager \
    --kubeconfig=/etc/kubernetes/controller-manager.conf \
    --authentication-kubeconfig=/etc/kubernetes/controller-manager.conf \
    --authorization-kubeconfig=/etc/kubernetes/controller-manager.conf \
    --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file=$pki/sa.key --root-ca-file=$pki/ca.crt \
    --cluster-signing-cert-file=$pki/ca.crt --cluster-signing-key-file=$pki/ca.key \
    --service-cluster-ip-range="$SERVICE_CIDR" --cluster-cidr="$CLUSTER_CIDR" \
    --allocate-node-cidrs=true --node-cidr-mask-size-ipv4="${NODE_CIDR_MASK:-24}" \
    --controllers='*,bootstrapsigner,tokencleaner' --profiling=false
  supervise kube-scheduler kube-scheduler --kubeconfig=/etc/kubernetes/scheduler.conf \
    --authentication-kubeconfig=/etc/kubernetes/scheduler.conf \
    --authorization-kubeconfig=/etc/kubernetes/scheduler.conf \
    --bind-address=127.0.0.1 --leader-elect=false --profiling=false
fi

supervise kubelet kubelet --config=/etc/kubernetes/kubelet-config.yaml \
  --kubeconfig=/etc/kubernetes/kubelet.conf --hostname-override="$NODE_NAME" \
  --node-ip="$NODE_IP" --v="${KUBELET_VERBOSITY:-0}"
supervise kube-proxy kube-proxy --config=/etc/kubernetes/kube-proxy-config.yaml \
  --hostname-override="$NODE_NAME"

log "started"
touch "$rundir/started"
trap 'log "stopping"; for f in "$rundir"/*.supervisor; do kill -TERM "$(cat "$f")" 2>/dev/null || true; done; wait; exit 0' TERM INT
while true; do sleep 3600 & wait $!; done

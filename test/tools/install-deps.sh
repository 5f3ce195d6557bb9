#!/usr/bin/env bash
# Installs the Debian packages tierflow's tests and demo need. Idempotent:
# does nothing when everything is already there. With the argument
# "cluster", also what the real test cluster (test/cluster) needs: Docker,
# containerd, runc and mmdebstrap.
set -euo pipefail
pkgs=(openvswitch-switch etcd-server iproute2 ethtool iperf3 iptables openssl)
if [[ "${1:-}" == cluster ]]; then
  pkgs=(docker.io containerd runc mmdebstrap)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The distribution's OVS service is not used: tests start their own daemons
# in private run directories.

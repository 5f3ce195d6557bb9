#!/usr/bin/env bash
# make demo: install what the demo needs, then run tierflow-demo (see
# test/demo/README.md). DEMO_KEEP=1 (default) leaves the cluster up in the
# background once the walk-through is done (stop it with `make
# testbed-down`); DEMO_KEEP=0 tears it down and returns the demo's status.
# DEMO_NODES sets the number of nodes (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
KEEP=${DEMO_KEEP:-1}
NODES=${DEMO_NODES:-2}
DIR=_output/testbed
LOG=_output/demo.log
MARK="=== tierflow demo done"

say() { printf '\n### %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
	echo "make demo needs root (network namespaces, Open vSwitch)" >&2
	exit 1
fi
if [ -f "$DIR/state.json" ]; then
	pid=$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$DIR/state.json" | head -1)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		echo "a test bed is already running (pid $pid, $DIR): run 'make testbed-down' first" >&2
		exit 1
	fi
fi

say "Installing the Debian packages the demo needs (make deps: openvswitch-switch, etcd-server, iproute2, ...)"
make --no-print-directory deps
say "Building kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (make kube-binaries: cached; the first build takes about ten minutes on two cores)"
make --no-print-directory kube-binaries
say "Building the demo (tierflow-demo; it builds tierflow-controller, tierflow-agent, tierctl and the test bed's programs itself)"
mkdir -p _output/bin
"$GO" build -o _output/bin/ ./test/demo/cmd/tierflow-demo

if [ "$KEEP" = 0 ]; then
	exec _output/bin/tierflow-demo --dir "$DIR" --nodes "$NODES" --keep=false
fi

# Keep: the demo runs in its own session so that it outlives this script;
# its output is followed here until the walk-through is done.
: >"$LOG"
setsid _output/bin/tierflow-demo --dir "$DIR" --nodes "$NODES" --keep >"$LOG" 2>&1 </dev/null &
demo=$!
tail -n +1 -f "$LOG" &
follower=$!
while ! grep -qxF "$MARK" "$LOG"; do
	if ! kill -0 "$demo" 2>/dev/null; then
		sleep 1
		kill "$follower" 2>/dev/null || true
		wait "$demo" || status=$?
		echo "the demo failed (exit status ${status:-0}); log: $LOG" >&2
		exit 1
	fi
	sleep 0.5
done
sleep 0.5
kill "$follower" 2>/dev/null || true
echo "(the demo keeps running as pid $demo; its log: $LOG)"

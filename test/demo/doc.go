// Package demo holds `make demo`: the policies it applies (*.yaml, one per
// tier), the script make runs (demo.sh: prerequisites, then the demo
// command) and the command itself (cmd/tierflow-demo, which says what each
// step shows). Its test runs the command in its tear-down mode
// (--keep=false, what DEMO_KEEP=0 runs) and checks what it printed.
//
// Choice: by default the demo leaves the cluster up (in the background,
// registered in _output/testbed/state.json like `make testbed-up`), since
// the point of a demo is to try things afterwards; `make testbed-down`
// stops it. DEMO_KEEP=0 tears it down at the end, for CI.
package demo

// Command agnhost-wrapper is /agnhost in the real test cluster's agnhost
// images (test/cluster): it runs the real agnhost
// (/usr/local/lib/agnhost/agnhost, of k8s.io/kubernetes v1.31.4) with the
// same arguments and environment — except that on a kernel without SCTP,
// `agnhost porter` is not asked to serve SCTP ports.
//
// Why: the upstream conformance suites give their server pods containers
// that serve only SCTP (`/agnhost porter` with SERVE_SCTP_PORT_9003).
// Without SCTP in the kernel, porter's listen fails and it exits, the
// container restarts forever, and the suites' pods never turn Ready, so
// no test runs at all. With the wrapper such a container runs without
// serving (every SCTP probe fails, as on the simulated test bed, which
// serves no SCTP either) and every other container is untouched. On a
// kernel with SCTP it changes nothing.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// realAgnhost is where the images put the real binary.
const realAgnhost = "/usr/local/lib/agnhost/agnhost"

// sctpServePrefix is porter's environment prefix of SCTP ports.
const sctpServePrefix = "SERVE_SCTP_PORT_"

func main() {
	env := os.Environ()
	if isPorter(os.Args[1:]) && !kernelHasSCTP() {
		var dropped []string
		env, dropped = withoutSCTPPorts(env)
		if len(dropped) > 0 {
			fmt.Fprintf(os.Stderr, "agnhost-wrapper: this kernel has no SCTP: not serving %s\n", strings.Join(dropped, ", "))
		}
		if !servesAnything(env) {
			waitForTermination()
			return
		}
	}
	err := syscall.Exec(realAgnhost, append([]string{"/agnhost"}, os.Args[1:]...), env)
	fmt.Fprintf(os.Stderr, "agnhost-wrapper: exec %s: %v\n", realAgnhost, err)
	os.Exit(127)
}

func isPorter(args []string) bool { return len(args) > 0 && args[0] == "porter" }

// kernelHasSCTP reports whether an SCTP socket can be made.
func kernelHasSCTP() bool {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, syscall.IPPROTO_SCTP)
	if err != nil {
		return false
	}
	syscall.Close(fd)
	return true
}

// withoutSCTPPorts drops porter's SCTP port variables from env and
// returns them.
func withoutSCTPPorts(env []string) (kept, dropped []string) {
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, sctpServePrefix) {
			dropped = append(dropped, name)
			continue
		}
		kept = append(kept, kv)
	}
	return kept, dropped
}

// servesAnything: porter has a port left to serve.
func servesAnything(env []string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, "SERVE_PORT_") || strings.HasPrefix(kv, "SERVE_TLS_PORT_") {
			return true
		}
	}
	return false
}

// waitForTermination runs like a server that serves nothing, until the
// kubelet stops the container.
func waitForTermination() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

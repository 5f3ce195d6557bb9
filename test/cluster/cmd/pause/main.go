// Command pause is the sandbox ("pause") container of the real test
// cluster's pods (test/cluster): it holds the pod's namespaces, reaps the
// zombies of a shared PID namespace, and exits on SIGINT or SIGTERM, as
// Kubernetes' own pause does. Built static into the image
// tierflow.local/pause, which each node's containerd uses as its
// sandbox_image; no image can be pulled where the cluster runs.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// Command coredns is CoreDNS v1.15.0 with only the plugins a cluster's DNS
// uses (the Corefile of test/cluster, as kubeadm and kind write it): the
// upstream command links every plugin, cloud providers included, and takes
// several times longer to build. Built by `make coredns` for the real test
// cluster's CoreDNS image (test/cluster); nothing in tierflow runs it.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }

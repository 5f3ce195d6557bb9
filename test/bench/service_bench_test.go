package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tierflow/tierflow/pkg/agent/policyflows"
	"github.com/tierflow/tierflow/pkg/agent/proxy"
	"github.com/tierflow/tierflow/pkg/agent/realizer"
	"github.com/tierflow/tierflow/test/kubeapi"
	"github.com/tierflow/tierflow/test/ovsenv"
)

// BenchmarkServiceProxy measures the agent's Service proxy with 10,000
// Services in a real kube-apiserver (quick: 1,000), watched by the proxy
// (pkg/agent/proxy's Watcher, Compiler) and realized into a real bridge
// (pkg/agent/realizer) as the agent does:
//
//   - the first realization of every Service (from the informers' sync),
//     and the flows and groups per Service;
//   - EndpointSlice change → flows: an endpoint added to or removed from
//     one Service's slice, timed from the API write until the bundle with
//     it is acknowledged by the switch: first with every Service compiled
//     and synced again at each change (slice-change-full-*), then with
//     only the Service that changed (slice-change-*, what the agent does:
//     Compiler.CompileChanges);
//   - connection setup rate (TCP connect and one echo, four clients in
//     parallel) and throughput (iperf3) from one pod to another, through
//     a Service's ClusterIP and to the pod's address, alternately in one
//     run.
func BenchmarkServiceProxy(b *testing.B) {
	nServices, changes, seconds, rounds := 10000, 40, 5, 3
	if quickScale() {
		nServices, changes, seconds, rounds = 1000, 10, 2, 2
	}
	kube := kubeapi.Start(b)
	// An ovs-vswitchd in a network namespace of its own: no host-wide
	// lock to wait for (the same userspace datapath).
	env := ovsenv.Start(b, ovsenv.WithOwnNetns())
	for b.Loop() {
		ctx := context.Background()
		n := newAgentNode(b, env, "sv", 1)
		client, server := n.br.Pods()[0], n.br.Pods()[1]
		serverIP := n.pods[1].IPs[0]
		srv := server.ListenTCP(8080)
		b.Cleanup(srv.Close)
		if _, err := n.r.Update(ctx, policyflows.Input{Node: "bench-node", Pods: n.pods}); err != nil {
			b.Fatal(err)
		}

		// The Services: each with two of the local pods as endpoints (the
		// benchmark's own first, port 8080 and iperf3's 5201).
		fmt.Printf("bench: creating %d Services and their EndpointSlices\n", nServices)
		start := time.Now()
		created := createServices(b, kube, nServices, n.pods[1].IPs[0].String(), n.pods[2].IPs[0].String())
		b.ReportMetric(time.Since(start).Seconds(), "create-s")

		// The proxy: watcher → compiler → realizer, as pkg/agent/runtime.
		comp := proxy.NewCompiler("bench-node", 1)
		var mu sync.Mutex
		var lastCommit time.Time
		var lastOut *proxy.Output
		kick := make(chan struct{}, 1)
		w := proxy.NewWatcher(kube.Kube, func() {
			select {
			case kick <- struct{}{}:
			default:
			}
		})
		wctx, cancel := context.WithCancel(ctx)
		b.Cleanup(cancel)
		watchStart := time.Now()
		if err := w.Run(wctx); err != nil {
			b.Fatal(err)
		}
		// incremental: realize only the Services that changed, as the
		// agent does (CompileChanges); off, every Service each time.
		var incremental atomic.Bool
		realizeOnce := func() {
			var out *proxy.Output
			if incremental.Load() {
				out = comp.CompileChanges(w.Changes(), n.r.Round())
			}
			if out != nil {
				if _, err := n.r.UpdateServiceChanges(ctx, realizer.ServiceChanges{Flows: out.FlowChanges, Groups: out.GroupChanges, DeleteCookies: out.DeleteCookies}); err != nil {
					b.Errorf("realizing Service changes: %v", err)
					return
				}
			} else {
				in, _ := w.Input()
				out = comp.Compile(in, n.r.Round())
				if _, err := n.r.UpdateServices(ctx, realizer.Services{Flows: out.Flows, Keys: out.Keys, Groups: out.Groups, DeleteCookies: out.DeleteCookies}); err != nil {
					b.Errorf("realizing Services: %v", err)
					return
				}
			}
			comp.Commit()
			mu.Lock()
			lastCommit, lastOut = time.Now(), out
			mu.Unlock()
		}
		<-kick
		realizeOnce()
		first := time.Since(watchStart)
		go func() {
			for {
				select {
				case <-wctx.Done():
					return
				case <-kick:
					time.Sleep(20 * time.Millisecond) // the agent's debounce
					select {
					case <-kick:
					default:
					}
					realizeOnce()
				}
			}
		}()
		mu.Lock()
		out := lastOut
		mu.Unlock()
		svcFlows := len(out.Flows)
		b.ReportMetric(first.Seconds(), "first-realize-s")
		b.ReportMetric(float64(len(out.Ports)), "service-ports")
		b.ReportMetric(float64(svcFlows)/float64(nServices), "flows/service")
		b.ReportMetric(float64(len(out.Groups))/float64(nServices), "groups/service")
		b.ReportMetric(float64(countFlows(b, n.br)), "bridge-flows")
		fmt.Printf("bench: %d Services realized in %v (%d flows, %d groups)\n", nServices, first.Round(time.Millisecond), svcFlows, len(out.Groups))

		// EndpointSlice change → flows: every Service compiled again (full,
		// as before CompileChanges), then only the one that changed, as
		// the agent does (incremental).
		slices := kube.Kube.DiscoveryV1().EndpointSlices("bench")
		change := 0
		measure := func(label string) {
			var lat []float64
			for i := 0; i < changes; i++ {
				// Not the first Service (the measured one).
				name := created[1+(change*7919)%(len(created)-1)]
				sl, err := slices.Get(ctx, name+"-1", metav1.GetOptions{})
				if err != nil {
					b.Fatal(err)
				}
				extra := fmt.Sprintf("10.1.%d.%d", change/250, change%250+1)
				change++
				add := len(sl.Endpoints) == 2
				if add {
					sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{extra}})
				} else {
					sl.Endpoints = sl.Endpoints[:2]
				}
				t0 := time.Now()
				if _, err := slices.Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
					b.Fatal(err)
				}
				deadline := time.Now().Add(time.Minute)
				for {
					mu.Lock()
					done := lastCommit.After(t0) && hasEndpoint(lastOut, name, sl.Endpoints[len(sl.Endpoints)-1].Addresses[0]) &&
						countEndpoints(lastOut, name) == len(sl.Endpoints)
					at := lastCommit
					mu.Unlock()
					if done {
						lat = append(lat, at.Sub(t0).Seconds()*1000)
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("%s change %d of Service %s not realized after a minute", label, i, name)
					}
					time.Sleep(time.Millisecond)
				}
			}
			sort.Float64s(lat)
			suffix := ""
			if label == "full" {
				suffix = "-full"
			}
			b.ReportMetric(lat[len(lat)/2], "slice-change"+suffix+"-p50-ms")
			b.ReportMetric(lat[len(lat)-1], "slice-change"+suffix+"-max-ms")
			fmt.Printf("bench: EndpointSlice change → flows (%s): p50 %.0f ms, max %.0f ms\n", label, lat[len(lat)/2], lat[len(lat)-1])
		}
		measure("full")
		incremental.Store(true)
		measure("incremental")
		b.ReportMetric(float64(changes), "slice-changes")

		// Connection setup and throughput, through the Service and direct.
		svc, err := kube.Kube.CoreV1().Services("bench").Get(ctx, created[0], metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		vip := netip.MustParseAddr(svc.Spec.ClusterIP)
		var viaRate, directRate, viaBps, directBps []float64
		for round := 0; round < rounds; round++ {
			viaRate = append(viaRate, connectRate(b, client, netip.AddrPortFrom(vip, 8080), time.Duration(seconds)*time.Second))
			directRate = append(directRate, connectRate(b, client, netip.AddrPortFrom(serverIP, 8080), time.Duration(seconds)*time.Second))
			viaBps = append(viaBps, iperf(b, client, server, vip, seconds))
			directBps = append(directBps, iperf(b, client, server, serverIP, seconds))
		}
		b.ReportMetric(median(viaRate), "service-conn/s")
		b.ReportMetric(median(directRate), "pod-conn/s")
		b.ReportMetric(median(viaBps)/1e9, "service-Gbps")
		b.ReportMetric(median(directBps)/1e9, "pod-Gbps")
		b.ReportMetric(float64(nServices), "services")
		b.ReportMetric(float64(rounds), "rounds")
		b.ReportMetric(float64(seconds), "iperf-s")
		fmt.Printf("bench: connections/s through the Service %.0f, to the pod %.0f; throughput %.2f / %.2f Gbit/s\n",
			median(viaRate), median(directRate), median(viaBps)/1e9, median(directBps)/1e9)
		reportMemory(b)
	}
}

// createServices creates n ClusterIP Services in namespace bench, each
// with an EndpointSlice of two endpoints (ports 8080 and 5201), and
// returns their names.
func createServices(b *testing.B, kube *kubeapi.Cluster, n int, ep1, ep2 string) []string {
	b.Helper()
	ctx := context.Background()
	if _, err := kube.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	names := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				name := fmt.Sprintf("svc-%05d", i)
				names[i] = name
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
					{Name: "echo", Protocol: corev1.ProtocolTCP, Port: 8080, TargetPort: intstr.FromInt32(8080)},
					{Name: "iperf", Protocol: corev1.ProtocolTCP, Port: iperfPort, TargetPort: intstr.FromInt32(iperfPort)}}}}
				if _, err := kube.Kube.CoreV1().Services("bench").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				echo, iperf, tcp, p1, p2 := "echo", "iperf", corev1.ProtocolTCP, int32(8080), int32(iperfPort)
				sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
					AddressType: discoveryv1.AddressTypeIPv4,
					Ports:       []discoveryv1.EndpointPort{{Name: &echo, Protocol: &tcp, Port: &p1}, {Name: &iperf, Protocol: &tcp, Port: &p2}},
					Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ep1}}, {Addresses: []string{ep2}}}}
				if i == 0 {
					// The measured Service reaches the server pod only.
					sl.Endpoints = sl.Endpoints[:1]
				}
				if _, err := kube.Kube.DiscoveryV1().EndpointSlices("bench").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				if i%1000 == 999 {
					fmt.Printf("bench: %d Services created\n", i+1)
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("creating Services: %v", err)
	default:
	}
	return names
}

func hasEndpoint(out *proxy.Output, svc, ip string) bool {
	for _, e := range out.Endpoints {
		if e.Port.Name == svc && e.Endpoint.IP.String() == ip {
			return true
		}
	}
	return false
}

func countEndpoints(out *proxy.Output, svc string) int {
	n := 0
	for _, e := range out.Endpoints {
		if e.Port.Name == svc && e.Port.Port == "echo" {
			n++
		}
	}
	return n
}

// connectRate is how many TCP connections (connect, one echo, close) per
// second four clients in pod c complete to dst in d.
func connectRate(b *testing.B, c *ovsenv.Pod, dst netip.AddrPort, d time.Duration) float64 {
	b.Helper()
	var done, failed atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16)
			for time.Now().Before(deadline) {
				var conn net.Conn
				err := c.InNetns(func() error {
					var err error
					conn, err = net.DialTimeout("tcp", dst.String(), 2*time.Second)
					return err
				})
				if err == nil {
					_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
					if _, err = conn.Write([]byte("x\n")); err == nil {
						_, err = conn.Read(buf)
					}
					conn.Close()
				}
				if err != nil {
					failed.Add(1)
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > done.Load()/100 {
		b.Fatalf("connections to %s: %d failed, %d done", dst, f, done.Load())
	}
	return float64(done.Load()) / d.Seconds()
}

// Command cyclonus-worker is /worker of the cyclonus-worker image that
// cyclonus's batch prober execs in each source pod (test/cyclonus,
// cmd/cyclonus-batch): it takes cyclonus's batch (v0.5.6 worker.Batch,
// --jobs as JSON), tries every connection of it, and prints cyclonus's
// results (worker.Result, JSON) as cyclonus's own worker does: a
// one-second timeout and one retry of a failed connection.
//
// It makes each connection itself, as `agnhost connect` does, instead of
// starting an agnhost process per connection as cyclonus's worker does:
// a TCP connection is allowed when the handshake completes; a UDP one
// when agnhost serve-hostname's answer to the datagram "hostname\n"
// arrives. Why: a step probes 324 connections (9 pods x 9 pods x 2 ports
// x 2 protocols), and starting agnhost (some 40 ms of CPU each) made a
// step's probe take ten seconds of this machine's two cores; in-process,
// all connections of a batch are in flight at once and a step takes the
// timeout of its denied connections. SCTP, which this prober does not
// speak, still goes through `agnhost connect`. A request without a host
// (a destination cyclonus has no address for) fails rather than reaching
// the pod itself, as net.Dial would take an empty host. A Service name is
// resolved once per batch (see resolver), then each connection is made to
// its address.
//
// On the tierflow test bed (test/testbed) kwok runs `kubectl exec`
// commands on the host, with the pod's network namespace named in
// TIERFLOW_NETNS (noderuntime.EnvNetns); /worker there is a symlink to
// this command (test/cyclonus.InstallBedWorker), which then re-executes
// itself in that namespace (`ip netns exec`, as the bed's /agnhost does),
// so its connections are the pod's.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mattfenwick/cyclonus/pkg/worker"
	v1 "k8s.io/api/core/v1"
)

// timeout and retries are those of cyclonus's worker.
const (
	timeout = time.Second
	retries = 1
)

// lookupTimeout bounds one resolution of a Service name (the resolver's
// own default): DNS is allowed in every case cyclonus generates, so how
// long a name takes decides nothing about policy, while a one-second
// bound failed every connection of a source pod whose lookups waited on
// a loaded machine (the bed's full run at load 22 on two cores: whole
// rows of four cases through Service names).
const lookupTimeout = 5 * time.Second

// bedNetnsEnv is noderuntime.EnvNetns (not imported: this command is
// built alone into the cyclonus-worker image).
const bedNetnsEnv = "TIERFLOW_NETNS"

func main() {
	if ns := os.Getenv(bedNetnsEnv); ns != "" {
		fail(inNetns(ns))
	}
	jobs := flag.String("jobs", "", "the batch, as JSON (cyclonus's worker.Batch)")
	flag.Parse()
	var batch worker.Batch
	if err := json.Unmarshal([]byte(*jobs), &batch); err != nil {
		fail(fmt.Errorf("--jobs: %w", err))
	}
	if err := batch.IsValid(); err != nil {
		fail(err)
	}
	results := make([]*worker.Result, len(batch.Requests))
	names := &resolver{names: map[string]*resolution{}}
	var wg sync.WaitGroup
	for i, r := range batch.Requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr, err := names.resolve(r.Host)
			if err == nil {
				err = connect(r, addr)
				for try := 0; try < retries && err != nil; try++ {
					err = connect(r, addr)
				}
			}
			results[i] = &worker.Result{Request: r}
			if err != nil {
				results[i].Error = err.Error()
			}
		}()
	}
	wg.Wait()
	out, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}

// inNetns re-executes this command in the network namespace ns (only
// returns on failure), without bedNetnsEnv, so it runs there as in a pod.
func inNetns(ns string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return fmt.Errorf("iproute2 is required on the test bed: %w", err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, bedNetnsEnv+"=") {
			env = append(env, kv)
		}
	}
	argv := append([]string{"ip", "netns", "exec", ns, self}, os.Args[1:]...)
	return fmt.Errorf("exec %s: %w", strings.Join(argv, " "), syscall.Exec(ip, argv, env))
}

// resolver resolves each host name of a batch once: a batch names each
// destination four times (two ports, two protocols), and through the
// pod's search list (ndots 5) each resolution is four names, A and AAAA:
// per connection, a step through Service names sent some 3,000 queries
// at once to the cluster DNS, inside the connections' one-second timeout.
type resolver struct {
	mu    sync.Mutex
	names map[string]*resolution
}

type resolution struct {
	once sync.Once
	addr string
	err  error
}

// resolve is host's first address (in the order Go's dialer would try
// them), or host itself if it is an address; a failed lookup is retried
// as a failed connection is, each within lookupTimeout.
func (r *resolver) resolve(host string) (string, error) {
	if host == "" {
		return "", errors.New("no address to connect to")
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return host, nil
	}
	r.mu.Lock()
	res := r.names[host]
	if res == nil {
		res = &resolution{}
		r.names[host] = res
	}
	r.mu.Unlock()
	res.once.Do(func() {
		for try := 0; try <= retries; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
			addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
			cancel()
			switch {
			case err != nil:
				res.err = err
			case len(addrs) == 0:
				res.err = fmt.Errorf("lookup %s: no address", host)
			default:
				res.addr, res.err = addrs[0].IP.String(), nil
				return
			}
		}
	})
	return res.addr, res.err
}

// connect is one `agnhost connect <address> --timeout=1s --protocol=...`
// to addr (the request's host, resolved).
func connect(r *worker.Request, addr string) error {
	address := net.JoinHostPort(addr, strconv.Itoa(r.Port))
	switch r.Protocol {
	case v1.ProtocolTCP:
		conn, err := net.DialTimeout("tcp", address, timeout)
		if err != nil {
			return err
		}
		return conn.Close()
	case v1.ProtocolUDP:
		conn, err := net.Dial("udp", address)
		if err != nil {
			return err
		}
		defer conn.Close()
		if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
			return err
		}
		if _, err := conn.Write([]byte("hostname\n")); err != nil {
			return err
		}
		buf := make([]byte, 1024)
		n, err := conn.Read(buf)
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("no data received from the server")
		}
		return nil
	default:
		cmd := r.Command()
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cyclonus-worker:", err)
	os.Exit(1)
}

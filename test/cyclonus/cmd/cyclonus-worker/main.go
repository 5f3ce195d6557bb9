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
// the pod itself, as net.Dial would take an empty host.
//
// On the tierflow test bed (test/testbed) kwok runs `kubectl exec`
// commands on the host, with the pod's network namespace named in
// TIERFLOW_NETNS (noderuntime.EnvNetns); /worker there is a symlink to
// this command (test/cyclonus.InstallBedWorker), which then re-executes
// itself in that namespace (`ip netns exec`, as the bed's /agnhost does),
// so its connections are the pod's.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
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
	var wg sync.WaitGroup
	for i, r := range batch.Requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := connect(r)
			for try := 0; try < retries && err != nil; try++ {
				err = connect(r)
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

// connect is one `agnhost connect <address> --timeout=1s --protocol=...`.
func connect(r *worker.Request) error {
	if r.Host == "" {
		return errors.New("no address to connect to")
	}
	switch r.Protocol {
	case v1.ProtocolTCP:
		conn, err := net.DialTimeout("tcp", r.Address(), timeout)
		if err != nil {
			return err
		}
		return conn.Close()
	case v1.ProtocolUDP:
		conn, err := net.Dial("udp", r.Address())
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

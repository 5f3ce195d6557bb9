package agnhost

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Kinds of endpoint a pod serves.
const (
	// KindRawTCP writes the body to each TCP connection and closes it
	// (serve-hostname --tcp).
	KindRawTCP = "raw-tcp"
	// KindUDP answers each datagram with the body.
	KindUDP = "udp"
	// KindHTTP answers every HTTP request with the body (serve-hostname
	// --http, porter SERVE_PORT_N).
	KindHTTP = "http"
	// KindTLS is KindHTTP over TLS (porter SERVE_TLS_PORT_N).
	KindTLS = "tls"
	// KindNetexecHTTP and KindNetexecUDP are netexec's HTTP and UDP
	// command servers.
	KindNetexecHTTP = "netexec-http"
	KindNetexecUDP  = "netexec-udp"
)

// Endpoint is one listener a pod serves.
type Endpoint struct {
	Kind string
	Port int
	// Body is what KindRawTCP, KindUDP, KindHTTP and KindTLS answer.
	Body string
	// JSONResponse makes KindHTTP/KindTLS answer {"Method":..,"Body":..}
	// (porter --json-response).
	JSONResponse bool
}

// Protocol is the transport protocol of the endpoint: "tcp" or "udp".
func (e Endpoint) Protocol() string {
	if e.Kind == KindUDP || e.Kind == KindNetexecUDP || e.Kind == KindDNSUDP {
		return "udp"
	}
	return "tcp"
}

func (e Endpoint) String() string { return fmt.Sprintf("%s/%d(%s)", e.Protocol(), e.Port, e.Kind) }

// Plan returns the endpoints an agnhost invocation serves: argv is the
// command line after "agnhost" (subcommand first), env the container's
// environment, hostname the pod's hostname. An argv that is not a serving
// agnhost subcommand (connect, unknown commands) serves nothing. Warnings
// name what is asked for but cannot be served here (SCTP); bad arguments
// are errors, as they would make agnhost exit.
func Plan(argv []string, env map[string]string, hostname string) ([]Endpoint, []string, error) {
	if len(argv) == 0 {
		return nil, nil, nil
	}
	sub, args := argv[0], argv[1:]
	switch sub {
	case "serve-hostname":
		eps, err := planServeHostname(args, hostname)
		return eps, nil, err
	case "porter":
		return planPorter(args, env)
	case "netexec":
		return planNetexec(args)
	default:
		return nil, nil, nil
	}
}

// IsAgnhost reports whether a container's command line runs agnhost, and
// returns the arguments after the agnhost binary. The agnhost image's
// entrypoint is /agnhost, so a container without command and with args
// ["serve-hostname", ...] runs it too when its image is agnhost. A shell
// wrapper, `sh -c "/agnhost serve-hostname --tcp ..."` (as the
// network-policy-api conformance manifests write it), runs it as well: the
// script's first agnhost command counts.
func IsAgnhost(image string, command, args []string) ([]string, bool) {
	argv := append(append([]string(nil), command...), args...)
	if len(command) > 0 {
		switch path.Base(command[0]) {
		case "agnhost":
			return argv[1:], true
		case "sh", "bash", "ash", "dash":
			if len(argv) >= 3 && argv[1] == "-c" {
				return agnhostInScript(argv[2])
			}
		}
		return nil, false
	}
	if strings.Contains(image, "agnhost") {
		return argv, true
	}
	return nil, false
}

// agnhostInScript finds the first agnhost command of a simple shell script
// (commands separated by ";", "&&", "||" or newlines; words split on
// blanks, quotes removed; a leading "exec" ignored).
func agnhostInScript(script string) ([]string, bool) {
	r := strings.NewReplacer("&&", "\n", "||", "\n", ";", "\n")
	for _, cmd := range strings.Split(r.Replace(script), "\n") {
		words := strings.Fields(cmd)
		for i, w := range words {
			words[i] = strings.Trim(w, `"'`)
		}
		if len(words) > 0 && words[0] == "exec" {
			words = words[1:]
		}
		if len(words) > 0 && path.Base(words[0]) == "agnhost" {
			return words[1:], true
		}
	}
	return nil, false
}

func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	// agnhost subcommands have flags this test bed does not model (e.g.
	// netexec --delay-shutdown); they must not stop the pod from serving.
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(new(strings.Builder))
	return fs
}

func planServeHostname(args []string, hostname string) ([]Endpoint, error) {
	fs := newFlagSet("serve-hostname")
	doTCP := fs.Bool("tcp", false, "")
	doUDP := fs.Bool("udp", false, "")
	doHTTP := fs.Bool("http", true, "")
	fs.Bool("close", false, "")
	port := fs.Int("port", 9376, "")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("serve-hostname: %w", err)
	}
	if *doHTTP && (*doTCP || *doUDP) {
		return nil, fmt.Errorf("serve-hostname: can't serve TCP/UDP mode and HTTP mode at the same time")
	}
	if err := validPort(*port); err != nil {
		return nil, fmt.Errorf("serve-hostname: %w", err)
	}
	var eps []Endpoint
	if *doTCP {
		eps = append(eps, Endpoint{Kind: KindRawTCP, Port: *port, Body: hostname})
	}
	if *doUDP {
		eps = append(eps, Endpoint{Kind: KindUDP, Port: *port, Body: hostname})
	}
	if *doHTTP {
		eps = append(eps, Endpoint{Kind: KindHTTP, Port: *port, Body: hostname})
	}
	return eps, nil
}

func planPorter(args []string, env map[string]string) ([]Endpoint, []string, error) {
	fs := newFlagSet("porter")
	jsonResp := fs.Bool("json-response", false, "")
	if err := fs.Parse(args); err != nil {
		return nil, nil, fmt.Errorf("porter: %w", err)
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var eps []Endpoint
	var warnings []string
	for _, k := range keys {
		var kind, port string
		switch {
		case strings.HasPrefix(k, "SERVE_PORT_"):
			kind, port = KindHTTP, strings.TrimPrefix(k, "SERVE_PORT_")
		case strings.HasPrefix(k, "SERVE_TCP_PORT_"):
			kind, port = KindHTTP, strings.TrimPrefix(k, "SERVE_TCP_PORT_")
		case strings.HasPrefix(k, "SERVE_UDP_PORT_"):
			kind, port = KindUDP, strings.TrimPrefix(k, "SERVE_UDP_PORT_")
		case strings.HasPrefix(k, "SERVE_TLS_PORT_"):
			kind, port = KindTLS, strings.TrimPrefix(k, "SERVE_TLS_PORT_")
		case strings.HasPrefix(k, "SERVE_SCTP_PORT_"):
			warnings = append(warnings, fmt.Sprintf("porter: %s: SCTP is not supported by the tierflow test bed, not served", k))
			continue
		default:
			continue
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			return nil, warnings, fmt.Errorf("porter: %s: invalid port %q", k, port)
		}
		if err := validPort(n); err != nil {
			return nil, warnings, fmt.Errorf("porter: %s: %w", k, err)
		}
		eps = append(eps, Endpoint{Kind: kind, Port: n, Body: env[k], JSONResponse: *jsonResp})
	}
	return eps, warnings, nil
}

func planNetexec(args []string) ([]Endpoint, []string, error) {
	fs := newFlagSet("netexec")
	httpPort := fs.Int("http-port", 8080, "")
	udpPort := fs.Int("udp-port", 8081, "")
	sctpPort := fs.Int("sctp-port", -1, "")
	if err := fs.Parse(args); err != nil {
		return nil, nil, fmt.Errorf("netexec: %w", err)
	}
	var warnings []string
	if *sctpPort != -1 {
		warnings = append(warnings, fmt.Sprintf("netexec: --sctp-port=%d: SCTP is not supported by the tierflow test bed, not served", *sctpPort))
	}
	if err := validPort(*httpPort); err != nil {
		return nil, warnings, fmt.Errorf("netexec: --http-port: %w", err)
	}
	eps := []Endpoint{{Kind: KindNetexecHTTP, Port: *httpPort}}
	if *udpPort != -1 {
		if err := validPort(*udpPort); err != nil {
			return nil, warnings, fmt.Errorf("netexec: --udp-port: %w", err)
		}
		eps = append(eps, Endpoint{Kind: KindNetexecUDP, Port: *udpPort})
	}
	return eps, warnings, nil
}

func validPort(p int) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("port %d out of range 1..65535", p)
	}
	return nil
}

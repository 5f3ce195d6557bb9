package agnhost

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// exitCode carries a subcommand's exit status out of cobra.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Main runs an agnhost command line (subcommand first, without the program
// name) and returns its exit status. Serving subcommands block until ctx is
// done or SIGTERM/SIGINT arrives. hostname is what serve-hostname and
// netexec answer.
func Main(ctx context.Context, args []string, hostname string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "agnhost",
		Short:         "agnhost-compatible test commands of the tierflow test bed",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)

	var (
		timeout  time.Duration
		protocol string
		udpData  string
		sctpData string
	)
	connect := &cobra.Command{
		Use:   "connect [host:port]",
		Short: "Attempts a TCP or UDP connection and returns useful errors",
		Long: `Tries to open a TCP or UDP connection to the given host and port. On error it prints an error message prefixed with a specific fixed string that test cases can check for:

* UNKNOWN - Generic/unknown (non-network) error (eg, bad arguments)
* TIMEOUT - The connection attempt timed out
* DNS - An error in DNS resolution
* REFUSED - Connection refused
* OTHER - Other networking error (eg, "no route to host")`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if code := Connect(a[0], protocol, timeout, udpData, stderr); code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
	connect.Flags().DurationVar(&timeout, "timeout", 0, "Maximum time before returning an error")
	connect.Flags().StringVar(&protocol, "protocol", "tcp", "The protocol to use to perform the connection, can be tcp or udp")
	connect.Flags().StringVar(&udpData, "udp-data", "hostname", "The UDP payload send to the server")
	connect.Flags().StringVar(&sctpData, "sctp-data", "hostname", "The SCTP payload send to the server (SCTP is not supported)")
	root.AddCommand(connect)

	for _, name := range []string{"serve-hostname", "porter", "netexec", "pause"} {
		name := name
		root.AddCommand(&cobra.Command{
			Use:                name,
			Short:              "serve like agnhost " + name,
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, a []string) error {
				return serveUntilDone(ctx, append([]string{name}, a...), hostname, stderr)
			},
		})
	}

	err := root.Execute()
	if err == nil {
		return 0
	}
	if code, ok := err.(exitCode); ok {
		return int(code)
	}
	fmt.Fprintf(stderr, "Error: %v\n", err)
	return 1
}

func serveUntilDone(ctx context.Context, argv []string, hostname string, stderr io.Writer) error {
	eps, warnings, err := Plan(argv, environ(), hostname)
	logger := log.New(stderr, "", log.LstdFlags)
	for _, w := range warnings {
		logger.Printf("warning: %s", w)
	}
	if err != nil {
		return err
	}
	s, err := Start(eps, hostname, logger)
	if err != nil {
		return err
	}
	defer s.Close()
	for _, ep := range eps {
		logger.Printf("Serving %s", ep)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	return nil
}

func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

package agnhost

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// Connect probes dest the way `agnhost connect` does and returns the exit
// status agnhost would have; diagnostics go to stderr with agnhost's exact
// wording, because conformance suites match on it.
func Connect(dest, protocol string, timeout time.Duration, udpData string, stderr io.Writer) int {
	switch protocol {
	case "", "tcp":
		return connectTCP(dest, timeout, stderr)
	case "udp":
		return connectUDP(dest, timeout, udpData, stderr)
	case "sctp":
		fmt.Fprintf(stderr, "OTHER: SCTP is not supported by the tierflow test bed\n")
		return 1
	default:
		fmt.Fprint(stderr, "Unsupported protocol\n", protocol)
		return 1
	}
}

func connectTCP(dest string, timeout time.Duration, stderr io.Writer) int {
	// Parse and resolve first so that bad input and name resolution
	// failures are told apart from network failures.
	if _, _, err := net.SplitHostPort(dest); err != nil {
		fmt.Fprintf(stderr, "UNKNOWN: %v\n", err)
		return 1
	}
	if _, err := net.ResolveTCPAddr("tcp", dest); err != nil {
		fmt.Fprintf(stderr, "DNS: %v\n", err)
		return 1
	}
	conn, err := net.DialTimeout("tcp", dest, timeout)
	if err == nil {
		conn.Close()
		return 0
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		if opErr.Timeout() {
			fmt.Fprintf(stderr, "TIMEOUT\n")
			return 1
		}
		var sysErr *os.SyscallError
		if errors.As(opErr.Err, &sysErr) && sysErr.Err == syscall.ECONNREFUSED {
			fmt.Fprintf(stderr, "REFUSED\n")
			return 1
		}
	}
	fmt.Fprintf(stderr, "OTHER: %v\n", err)
	return 1
}

func connectUDP(dest string, timeout time.Duration, data string, stderr io.Writer) int {
	if _, err := net.ResolveUDPAddr("udp", dest); err != nil {
		fmt.Fprintf(stderr, "DNS: %v\n", err)
		return 1
	}
	conn, err := net.Dial("udp", dest)
	if err != nil {
		fmt.Fprintf(stderr, "OTHER: %v\n", err)
		return 1
	}
	defer conn.Close()
	if timeout > 0 {
		if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
			fmt.Fprintf(stderr, "OTHER: %v\n", err)
			return 1
		}
	}
	if _, err := conn.Write([]byte(data + "\n")); err != nil {
		return udpFailure(err, stderr)
	}
	buf := make([]byte, 1024)
	n, err := conn.Read(buf)
	if err != nil {
		return udpFailure(err, stderr)
	}
	if n == 0 {
		fmt.Fprintf(stderr, "OTHER: No data received from the server. Cannot guarantee the server received the request.\n")
		return 1
	}
	return 0
}

func udpFailure(err error, stderr io.Writer) int {
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		fmt.Fprintf(stderr, "TIMEOUT: %v\n", err)
	case strings.Contains(err.Error(), "connection refused"):
		fmt.Fprintf(stderr, "REFUSED: %v\n", err)
	default:
		fmt.Fprintf(stderr, "UNKNOWN: %v\n", err)
	}
	return 1
}

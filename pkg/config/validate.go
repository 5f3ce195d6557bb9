package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// logLevels maps the accepted log level names to slog levels.
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

func checkLogLevel(key, v string) error {
	if _, ok := logLevels[v]; !ok {
		return &FieldError{Key: key, Value: v, Reason: "must be one of debug, info, warn, error"}
	}
	return nil
}

func mustLevel(v string) slog.Level {
	if l, ok := logLevels[v]; ok {
		return l
	}
	return slog.LevelInfo
}

// checkListenAddress accepts host:port where host is empty (every
// interface), an IP address or a DNS name, and port is 0..65535 (0: a free
// port). With optional, the empty string (disabled) is accepted.
func checkListenAddress(key, v string, optional bool) error {
	if v == "" {
		if optional {
			return nil
		}
		return &FieldError{Key: key, Value: v, Reason: "must not be empty; use host:port, e.g. :10349"}
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return &FieldError{Key: key, Value: v, Reason: "must be host:port, e.g. :10349 or 127.0.0.1:10349 or [::1]:10349"}
	}
	if err := checkPort(key, v, port, 0); err != nil {
		return err
	}
	if host != "" {
		if err := checkHost(key, v, host); err != nil {
			return err
		}
	}
	return nil
}

// checkDialAddress accepts host:port with a non-empty host and a port in
// 1..65535.
func checkDialAddress(key, v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil || host == "" {
		return &FieldError{Key: key, Value: v, Reason: "must be host:port with a host, e.g. tierflow-controller.kube-system.svc:10349"}
	}
	if err := checkPort(key, v, port, 1); err != nil {
		return err
	}
	return checkHost(key, v, host)
}

func checkPort(key, v, port string, min int) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < min || n > 65535 {
		return &FieldError{Key: key, Value: v, Reason: fmt.Sprintf("port must be a number in %d..65535", min)}
	}
	return nil
}

func checkHost(key, v, host string) error {
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(strings.ToLower(host)); len(errs) > 0 {
		return &FieldError{Key: key, Value: v, Reason: "host must be an IP address or a DNS name"}
	}
	return nil
}

// checkDNSSubdomain checks a Kubernetes object or namespace name.
func checkDNSSubdomain(key, v string, label bool) error {
	var errs []string
	if label {
		errs = validation.IsDNS1123Label(v)
	} else {
		errs = validation.IsDNS1123Subdomain(v)
	}
	if len(errs) > 0 {
		return &FieldError{Key: key, Value: v, Reason: "must be a valid Kubernetes name: " + errs[0]}
	}
	return nil
}

// checkPath rejects an empty required path and characters no path an
// operator means contains.
func checkPath(key, v string, required bool) error {
	if v == "" {
		if required {
			return &FieldError{Key: key, Value: v, Reason: "must not be empty"}
		}
		return nil
	}
	if strings.ContainsAny(v, "\x00\n\r") {
		return &FieldError{Key: key, Value: v, Reason: "must be a file path"}
	}
	return nil
}

// checkAbsPath is checkPath for a path that must be absolute (a directory
// on the node, shared with other programs that do not share our working
// directory).
func checkAbsPath(key, v string) error {
	if err := checkPath(key, v, true); err != nil {
		return err
	}
	if !strings.HasPrefix(v, "/") {
		return &FieldError{Key: key, Value: v, Reason: "must be an absolute path"}
	}
	return nil
}

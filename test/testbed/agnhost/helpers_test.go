package agnhost

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func httpBody(t *testing.T, scheme, addr, path string) string {
	t.Helper()
	// Dial on the calling (namespace-locked) thread: a fresh transport
	// without keep-alives dials synchronously from this goroutine.
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       nil,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
	}}
	tr := c.Transport.(*http.Transport)
	used := false
	tr.Dial = func(string, string) (net.Conn, error) {
		if used {
			return nil, io.ErrUnexpectedEOF
		}
		used = true
		return conn, nil
	}
	resp, err := c.Get(scheme + "://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func udpAsk(t *testing.T, addr, msg string) string {
	t.Helper()
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write([]byte(msg + "\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("UDP %s: %v", addr, err)
	}
	return string(buf[:n])
}

func rawRead(t *testing.T, addr string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	data, _ := io.ReadAll(conn)
	return string(data)
}

package queryapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tierflow/tierflow/pkg/explain"
	"github.com/tierflow/tierflow/pkg/model"
	"github.com/tierflow/tierflow/pkg/queryapi/agentquery"
)

// ClientConfig says how to reach the controller's query API.
type ClientConfig struct {
	// Address is host:port or an https:// URL.
	Address string
	// Token is the bearer token sent with every request.
	Token string
	// CAFile verifies the controller's serving certificate; empty uses the
	// system roots. Insecure skips verification (testing only).
	CAFile     string
	ServerName string
	Insecure   bool
	Timeout    time.Duration
}

// Client queries the controller.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
}

// NewClient checks cfg and returns a client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Address == "" {
		return nil, errors.New("no controller address (--controller HOST:PORT or TIERCTL_CONTROLLER)")
	}
	addr := cfg.Address
	if !strings.Contains(addr, "://") {
		addr = "https://" + addr
	}
	base, err := url.Parse(addr)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("controller address %q: want HOST:PORT or https://HOST:PORT", cfg.Address)
	}
	if base.Scheme != "https" {
		// A bearer token must never cross the network in clear text.
		return nil, fmt.Errorf("controller address %q: the query API is HTTPS only", cfg.Address)
	}
	if cfg.Token == "" {
		return nil, errors.New("no token for the controller (--token, or a kubeconfig user with a token)")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName, InsecureSkipVerify: cfg.Insecure}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("controller CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("controller CA %s: no PEM certificate in it", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	return &Client{base: base, token: cfg.Token, hc: &http.Client{
		Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment},
		Timeout:   cfg.Timeout,
	}}, nil
}

// Agent returns a client of node's agent query API, reached through the
// controller (/v1/nodes/NODE/agent/...), which forwards each request over
// the agent's distribution stream.
func (c *Client) Agent(node string) *agentquery.Client {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/nodes/" + url.PathEscape(node) + "/agent"
	hc := *c.hc
	hc.Transport = bearer{token: c.token, next: c.hc.Transport}
	return agentquery.NewForwardedClient(u.String(), &hc)
}

// bearer adds the caller's token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// Nodes asks /v1/nodes: the connected nodes, or those hosting pods
// (NS/NAME) and addresses.
func (c *Client) Nodes(ctx context.Context, pods, ips []string) ([]string, error) {
	var out Nodes
	return out.Nodes, c.get(ctx, "/v1/nodes", url.Values{"pod": pods, "ip": ips}, &out)
}

// Snapshot asks /v1/snapshot.
func (c *Client) Snapshot(ctx context.Context) (*model.Snapshot, error) {
	var out model.Snapshot
	return &out, c.get(ctx, "/v1/snapshot", nil, &out)
}

// Policies asks /v1/policies.
func (c *Client) Policies(ctx context.Context) (*Policies, error) {
	var out Policies
	return &out, c.get(ctx, "/v1/policies", nil, &out)
}

// Explain asks /v1/explain. src and dst are NS/POD or IP; port PROTO/PORT.
func (c *Client) Explain(ctx context.Context, src, dst, port string) (*explain.Result, error) {
	var out explain.Result
	return &out, c.get(ctx, "/v1/explain", url.Values{"src": {src}, "dst": {dst}, "port": {port}}, &out)
}

// ExplainEndpoint asks /v1/explain about a connection a Service sent to
// endpoint dst (see explain.Query.ThroughService).
func (c *Client) ExplainEndpoint(ctx context.Context, src, dst, port string) (*explain.Result, error) {
	var out explain.Result
	return &out, c.get(ctx, "/v1/explain", url.Values{"src": {src}, "dst": {dst}, "port": {port}, "through-service": {"true"}}, &out)
}

// Matrix asks /v1/matrix.
func (c *Client) Matrix(ctx context.Context, ports []string) (*MatrixResult, error) {
	var out MatrixResult
	return &out, c.get(ctx, "/v1/matrix", url.Values{"port": ports}, &out)
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("controller %s unreachable: %w", c.base.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("controller %s: reading the answer: %w", c.base.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e Error
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("controller: %s", e.Error)
		}
		return fmt.Errorf("controller %s: HTTP %d on %s", c.base.Host, resp.StatusCode, path)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("controller %s: bad answer on %s: %w", c.base.Host, path, err)
	}
	return nil
}

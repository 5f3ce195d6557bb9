package agentquery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultSocket is where tierflow-agent serves the query API unless
// --query-socket says otherwise: the OVS run directory, which the agent's
// DaemonSet already shares with the host, so tooling on the node (or in
// the agent's pod) finds it.
const DefaultSocket = "/run/openvswitch/tierflow-agent.sock"

// Client queries one agent: on its socket, or through the controller
// (NewForwardedClient).
type Client struct {
	// socket names where the agent is, in errors.
	socket string
	// base is the URL the endpoint paths (/v1/...) are appended to.
	base string
	hc   *http.Client
}

// NewForwardedClient returns a client for an agent reached through
// another HTTP server that forwards the agent's endpoints under base
// (e.g. the controller's https://HOST:PORT/v1/nodes/NODE/agent): hc
// carries the authentication that server needs.
func NewForwardedClient(base string, hc *http.Client) *Client {
	return &Client{socket: "forwarded by " + base, base: strings.TrimSuffix(base, "/"), hc: hc}
}

// NewClient returns a client for the agent listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &Client{socket: socket, base: "http://agent", hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// Status asks /v1/status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var out Status
	return &out, c.get(ctx, "/v1/status", nil, &out)
}

// Realization asks /v1/realization.
func (c *Client) Realization(ctx context.Context) (*Realization, error) {
	var out Realization
	return &out, c.get(ctx, "/v1/realization", nil, &out)
}

// Updates asks /v1/updates.
func (c *Client) Updates(ctx context.Context) (*Updates, error) {
	var out Updates
	return &out, c.get(ctx, "/v1/updates", nil, &out)
}

// Rules asks /v1/rules.
func (c *Client) Rules(ctx context.Context) (*Rules, error) {
	var out Rules
	return &out, c.get(ctx, "/v1/rules", nil, &out)
}

// Pods asks /v1/pods.
func (c *Client) Pods(ctx context.Context) (*Pods, error) {
	var out Pods
	return &out, c.get(ctx, "/v1/pods", nil, &out)
}

// Flows asks /v1/flows with f.
func (c *Client) Flows(ctx context.Context, f FlowFilter) (*Flows, error) {
	var out Flows
	return &out, c.get(ctx, "/v1/flows", f.Values(), &out)
}

// Trace asks /v1/trace.
func (c *Client) Trace(ctx context.Context, r TraceRequest) (*Trace, error) {
	v := url.Values{}
	v.Set("src", r.Src)
	v.Set("dst", r.Dst)
	if r.Protocol != "" {
		v.Set("protocol", r.Protocol)
	}
	v.Set("port", strconv.Itoa(r.Port))
	var out Trace
	return &out, c.get(ctx, "/v1/trace", v, &out)
}

// OfprotoTrace asks /v1/ofproto-trace: ofproto/trace of flow (ovs-ofctl
// syntax) through the agent's bridge as a new connection.
func (c *Client) OfprotoTrace(ctx context.Context, flow string) (*Trace, error) {
	var out Trace
	return &out, c.get(ctx, "/v1/ofproto-trace", url.Values{"flow": {flow}}, &out)
}

// BridgeFlows asks /v1/bridge-flows.
func (c *Client) BridgeFlows(ctx context.Context) (*BridgeFlows, error) {
	var out BridgeFlows
	return &out, c.get(ctx, "/v1/bridge-flows", nil, &out)
}

// Values encodes the filter as query parameters.
func (f FlowFilter) Values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("policy", f.Policy)
	set("direction", f.Direction)
	set("table", f.Table)
	set("pod", f.Pod)
	if f.Rule != nil {
		v.Set("rule", strconv.Itoa(*f.Rule))
	}
	return v
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("agent query socket %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("agent query %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e Error
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("agent query %s: %s", path, e.Error)
		}
		return fmt.Errorf("agent query %s: HTTP %d", path, resp.StatusCode)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("agent query %s: bad answer: %w", path, err)
	}
	return nil
}

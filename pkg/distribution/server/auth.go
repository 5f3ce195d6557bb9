package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Authenticator maps an agent's bearer token to the node it may receive
// objects for. The node comes from the token alone: an agent cannot ask
// for another node's objects.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (node string, err error)
}

// ErrNotBound is returned for a valid token that names no node.
var ErrNotBound = errors.New("token is not bound to a node or a pod on a node")

// ErrReviewUnavailable is wrapped by an Authenticator's errors that are no
// verdict on the token: the API server could not be asked. The server
// refuses a new stream on any error, but keeps an open stream through
// such failures (it re-authenticates it at the next interval).
var ErrReviewUnavailable = errors.New("token review unavailable")

// Rechecker is implemented by Authenticators that cache their verdicts:
// Recheck checks a token again, never answering from the cache. The
// server re-authenticates open streams with it (with Authenticate when an
// Authenticator does not implement it).
type Rechecker interface {
	Recheck(ctx context.Context, token string) (node string, err error)
}

// Extra keys the kube-apiserver puts in a TokenReview's user info for
// bound service account tokens (KEP-4193).
const (
	extraNodeName = "authentication.kubernetes.io/node-name"
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
)

// TokenReviewConfig configures a TokenReviewAuthenticator.
type TokenReviewConfig struct {
	// Audiences the token must be issued for (TokenReview spec.audiences);
	// empty means the API server's own audience.
	Audiences []string
	// ServiceAccounts are the agent identities accepted, as
	// "namespace/name". Required: a token of any other account is refused
	// even if bound to a node.
	ServiceAccounts []string
	// CacheTTL is how long a positive review is reused (default 1m; 0
	// keeps the default, negative disables the cache). Failed reviews are
	// never cached.
	CacheTTL time.Duration
}

// TokenReviewAuthenticator checks agent tokens with the TokenReview API and
// takes the node from the token's binding: the node-name extra of a token
// bound to a Node or to a Pod (set by kube-apiserver ≥1.30), or else the
// bound pod's spec.nodeName (the pod-name/pod-uid extras, checked against
// the live pod's UID).
type TokenReviewAuthenticator struct {
	client kubernetes.Interface
	cfg    TokenReviewConfig
	accept map[string]bool // "system:serviceaccount:ns:name"

	mu    sync.Mutex
	cache map[[32]byte]cachedReview
}

type cachedReview struct {
	node    string
	expires time.Time
}

// NewTokenReviewAuthenticator returns an authenticator using client (which
// needs create on tokenreviews and get on pods).
func NewTokenReviewAuthenticator(client kubernetes.Interface, cfg TokenReviewConfig) (*TokenReviewAuthenticator, error) {
	if len(cfg.ServiceAccounts) == 0 {
		return nil, errors.New("no agent service accounts configured")
	}
	accept := map[string]bool{}
	for _, sa := range cfg.ServiceAccounts {
		ns, name, ok := strings.Cut(sa, "/")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("service account %q is not namespace/name", sa)
		}
		accept["system:serviceaccount:"+ns+":"+name] = true
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = time.Minute
	}
	return &TokenReviewAuthenticator{client: client, cfg: cfg, accept: accept, cache: map[[32]byte]cachedReview{}}, nil
}

// Authenticate implements Authenticator.
func (a *TokenReviewAuthenticator) Authenticate(ctx context.Context, token string) (string, error) {
	return a.authenticate(ctx, token, true)
}

// Recheck implements Rechecker: a review that ignores the cache (and
// refreshes it).
func (a *TokenReviewAuthenticator) Recheck(ctx context.Context, token string) (string, error) {
	return a.authenticate(ctx, token, false)
}

func (a *TokenReviewAuthenticator) authenticate(ctx context.Context, token string, useCache bool) (string, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	if a.cfg.CacheTTL > 0 && useCache {
		a.mu.Lock()
		c, ok := a.cache[key]
		a.mu.Unlock()
		if ok && now.Before(c.expires) {
			return c.node, nil
		}
	}
	node, err := a.review(ctx, token)
	if err != nil {
		if !errors.Is(err, ErrReviewUnavailable) {
			// A refused token must not stay good in the cache (a
			// Recheck that failed, then a reconnection).
			a.mu.Lock()
			delete(a.cache, key)
			a.mu.Unlock()
		}
		return "", err
	}
	if a.cfg.CacheTTL > 0 {
		a.mu.Lock()
		if len(a.cache) > 10000 { // bound memory; entries are cheap to redo
			clear(a.cache)
		}
		expires := now.Add(a.cfg.CacheTTL)
		if exp, ok := TokenExpiry(token); ok && exp.Before(expires) {
			// Never vouch for a token past its own expiry.
			expires = exp
		}
		a.cache[key] = cachedReview{node: node, expires: expires}
		a.mu.Unlock()
	}
	return node, nil
}

// review asks the API server about token and returns its node.
func (a *TokenReviewAuthenticator) review(ctx context.Context, token string) (string, error) {
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: a.cfg.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrReviewUnavailable, err)
	}
	st := tr.Status
	if !st.Authenticated {
		if st.Error != "" {
			return "", fmt.Errorf("token not authenticated: %s", st.Error)
		}
		return "", errors.New("token not authenticated")
	}
	if !a.accept[st.User.Username] {
		return "", fmt.Errorf("%s is not an agent service account", st.User.Username)
	}
	if node := first(st.User.Extra[extraNodeName]); node != "" {
		return node, nil
	}
	return a.nodeOfPod(ctx, st.User)
}

func (a *TokenReviewAuthenticator) nodeOfPod(ctx context.Context, u authnv1.UserInfo) (string, error) {
	podName, podUID := first(u.Extra[extraPodName]), first(u.Extra[extraPodUID])
	if podName == "" || podUID == "" {
		return "", ErrNotBound
	}
	// system:serviceaccount:NS:NAME — a bound pod is in the account's namespace.
	parts := strings.Split(u.Username, ":")
	ns := parts[2]
	pod, err := a.client.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("bound pod %s/%s is gone", ns, podName)
	}
	if err != nil {
		return "", fmt.Errorf("%w: bound pod %s/%s: %w", ErrReviewUnavailable, ns, podName, err)
	}
	if string(pod.UID) != podUID {
		return "", fmt.Errorf("bound pod %s/%s was replaced", ns, podName)
	}
	if pod.Spec.NodeName == "" {
		return "", fmt.Errorf("bound pod %s/%s is not scheduled: %w", ns, podName, ErrNotBound)
	}
	return pod.Spec.NodeName, nil
}

func first(v authnv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// TokenExpiry reads the expiry (the "exp" claim) of a JWT, such as a
// service account token, without verifying it: callers use it only for a
// token an Authenticator accepted, whose claims the API server verified.
// False when the token is no JWT or has no expiry.
func TokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	secs, err := claims.Exp.Float64()
	if err != nil || secs <= 0 {
		return time.Time{}, false
	}
	return time.Unix(int64(secs), 0), true
}

// StaticTokens authenticates fixed tokens, each naming its node: for
// development setups and for tests that exercise the stream rather than
// authentication.
type StaticTokens map[string]string

// Authenticate implements Authenticator.
func (t StaticTokens) Authenticate(_ context.Context, token string) (string, error) {
	if n, ok := t[token]; ok && token != "" {
		return n, nil
	}
	return "", errors.New("unknown token")
}

// authenticate finds the calling agent's node from the call's bearer
// token, and returns the token for re-authentication.
func (s *Server) authenticate(ctx context.Context) (node, token string, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			token = strings.TrimSpace(t)
		}
	}
	if token == "" {
		return "", "", status.Error(codes.Unauthenticated, "no bearer token")
	}
	if s.auth == nil {
		// Fail closed: a server built without an authenticator serves no one.
		return "", "", status.Error(codes.Unauthenticated, "no authenticator configured")
	}
	node, err = s.auth.Authenticate(ctx, token)
	if err != nil {
		return "", "", authStatus(err)
	}
	if node == "" {
		return "", "", status.Error(codes.PermissionDenied, ErrNotBound.Error())
	}
	return node, token, nil
}

func authStatus(err error) error {
	if errors.Is(err, ErrNotBound) {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return status.Error(codes.Unauthenticated, err.Error())
}

// keepAuthenticated re-authenticates an open stream's token every
// ReauthInterval (with jitter, so a controller's streams do not review at
// once) and at the token's expiry, and returns why the stream must end:
// the token expired, is no longer accepted (a bound token's pod was
// deleted, its service account removed), or names another node. A review
// the API server could not answer keeps the stream (until the token's
// expiry, which needs no review). It returns nil when ctx ends.
func (s *Server) keepAuthenticated(ctx context.Context, node, token string) error {
	exp, hasExp := TokenExpiry(token)
	for {
		wait := s.opts.ReauthInterval/2 + rand.N(s.opts.ReauthInterval/2+1)
		if hasExp {
			wait = min(wait, time.Until(exp))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if hasExp && !time.Now().Before(exp) {
			return status.Error(codes.Unauthenticated, "the stream's token expired: reconnect with a fresh one")
		}
		got, err := s.recheck(ctx, token)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrReviewUnavailable):
			s.log.Warn("cannot re-authenticate an agent's stream; keeping it", "node", node, "err", err)
		case err != nil:
			return authStatus(fmt.Errorf("re-authentication: %w", err))
		case got != node:
			return status.Errorf(codes.PermissionDenied, "re-authentication: the token now names node %q, not %q", got, node)
		}
	}
}

func (s *Server) recheck(ctx context.Context, token string) (string, error) {
	if r, ok := s.auth.(Rechecker); ok {
		return r.Recheck(ctx, token)
	}
	return s.auth.Authenticate(ctx, token)
}

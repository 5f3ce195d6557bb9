package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
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
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	if a.cfg.CacheTTL > 0 {
		a.mu.Lock()
		c, ok := a.cache[key]
		a.mu.Unlock()
		if ok && now.Before(c.expires) {
			return c.node, nil
		}
	}
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: a.cfg.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token review: %w", err)
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
	node := first(st.User.Extra[extraNodeName])
	if node == "" {
		node, err = a.nodeOfPod(ctx, st.User)
		if err != nil {
			return "", err
		}
	}
	if a.cfg.CacheTTL > 0 {
		a.mu.Lock()
		if len(a.cache) > 10000 { // bound memory; entries are cheap to redo
			clear(a.cache)
		}
		a.cache[key] = cachedReview{node: node, expires: now.Add(a.cfg.CacheTTL)}
		a.mu.Unlock()
	}
	return node, nil
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
	if err != nil {
		return "", fmt.Errorf("bound pod %s/%s: %w", ns, podName, err)
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
// token.
func (s *Server) authenticate(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var token string
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			token = strings.TrimSpace(t)
		}
	}
	if token == "" {
		return "", status.Error(codes.Unauthenticated, "no bearer token")
	}
	if s.auth == nil {
		// Fail closed: a server built without an authenticator serves no one.
		return "", status.Error(codes.Unauthenticated, "no authenticator configured")
	}
	node, err := s.auth.Authenticate(ctx, token)
	if errors.Is(err, ErrNotBound) {
		return "", status.Error(codes.PermissionDenied, err.Error())
	}
	if err != nil {
		return "", status.Error(codes.Unauthenticated, err.Error())
	}
	if node == "" {
		return "", status.Error(codes.PermissionDenied, ErrNotBound.Error())
	}
	return node, nil
}

package queryapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The RBAC resource a query needs "get" on.
const (
	AuthGroup    = "tierflow.io"
	AuthResource = "queries"
)

// errUnauthenticated and errForbidden map to 401 and 403.
var (
	errUnauthenticated = errors.New("unauthenticated")
	errForbidden       = errors.New("forbidden")
)

// Authorizer checks a request's bearer token with a TokenReview and its
// permission with a SubjectAccessReview. Decisions are cached for a short
// time (by token hash and endpoint) so that a tierctl matrix or a script
// in a loop does not cost two API calls per request; a revoked permission
// takes effect within CacheTTL.
type Authorizer struct {
	client   kubernetes.Interface
	cacheTTL time.Duration

	mu    sync.Mutex
	cache map[cacheKey]decision
}

type cacheKey struct {
	token    [32]byte
	endpoint string
}

type decision struct {
	user    string
	err     error
	expires time.Time
}

// NewAuthorizer returns an Authorizer that calls the API server with client
// (which needs create on tokenreviews and subjectaccessreviews).
func NewAuthorizer(client kubernetes.Interface, cacheTTL time.Duration) *Authorizer {
	return &Authorizer{client: client, cacheTTL: cacheTTL, cache: map[cacheKey]decision{}}
}

// Authorize returns the user a request acts as, or an error wrapping
// errUnauthenticated or errForbidden.
func (a *Authorizer) Authorize(r *http.Request, endpoint string) (string, error) {
	h := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(h, "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return "", fmt.Errorf("%w: no bearer token (the query API needs a Kubernetes token)", errUnauthenticated)
	}
	key := cacheKey{sha256.Sum256([]byte(token)), endpoint}
	now := time.Now()
	a.mu.Lock()
	d, hit := a.cache[key]
	a.mu.Unlock()
	if hit && now.Before(d.expires) {
		return d.user, d.err
	}
	user, err := a.review(r.Context(), token, endpoint)
	// Only definite answers are cached, never API server failures.
	if err == nil || errors.Is(err, errUnauthenticated) || errors.Is(err, errForbidden) {
		a.mu.Lock()
		if len(a.cache) > 10000 {
			a.cache = map[cacheKey]decision{}
		}
		a.cache[key] = decision{user: user, err: err, expires: now.Add(a.cacheTTL)}
		a.mu.Unlock()
	}
	return user, err
}

func (a *Authorizer) review(ctx context.Context, token, endpoint string) (string, error) {
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		msg := tr.Status.Error
		if msg == "" {
			msg = "token not accepted"
		}
		return "", fmt.Errorf("%w: %s", errUnauthenticated, msg)
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			ResourceAttributes: &authzv1.ResourceAttributes{
				Verb: "get", Group: AuthGroup, Resource: AuthResource, Name: endpoint,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("subject access review: %w", err)
	}
	if !sar.Status.Allowed {
		return u.Username, fmt.Errorf("%w: user %q may not get %s/%s %s", errForbidden, u.Username, AuthGroup, AuthResource, endpoint)
	}
	return u.Username, nil
}

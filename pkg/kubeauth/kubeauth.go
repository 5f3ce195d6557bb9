package kubeauth

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

// ErrUnauthenticated (401) and ErrForbidden (403) are wrapped by
// Authorize's definite refusals; any other error means the API server
// could not answer (503).
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
)

// Action is what a request asks to do: a resource or a non-resource URL.
type Action struct {
	Resource    *authzv1.ResourceAttributes
	NonResource *authzv1.NonResourceAttributes
}

// ResourceAction is verb on resource name of group/resource.
func ResourceAction(verb, group, resource, name string) Action {
	return Action{Resource: &authzv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Name: name}}
}

// NonResourceAction is verb on the non-resource URL path.
func NonResourceAction(verb, path string) Action {
	return Action{NonResource: &authzv1.NonResourceAttributes{Verb: verb, Path: path}}
}

func (a Action) String() string {
	if a.NonResource != nil {
		return a.NonResource.Verb + " " + a.NonResource.Path
	}
	r := a.Resource
	return fmt.Sprintf("%s %s/%s %s", r.Verb, r.Group, r.Resource, r.Name)
}

// Authorizer checks requests against the API server. Safe for concurrent
// use.
type Authorizer struct {
	client   kubernetes.Interface
	cacheTTL time.Duration

	mu    sync.Mutex
	cache map[cacheKey]decision
}

type cacheKey struct {
	token  [32]byte
	action string
}

type decision struct {
	user    string
	err     error
	expires time.Time
}

// New returns an Authorizer calling the API server with client, which
// needs create on tokenreviews and subjectaccessreviews (the
// system:auth-delegator ClusterRole). Decisions are cached for cacheTTL
// (0: not cached).
func New(client kubernetes.Interface, cacheTTL time.Duration) *Authorizer {
	return &Authorizer{client: client, cacheTTL: cacheTTL, cache: map[cacheKey]decision{}}
}

// Authorize returns the user r acts as if it may do action, or an error
// wrapping ErrUnauthenticated or ErrForbidden, or another error when the
// API server could not answer.
func (a *Authorizer) Authorize(r *http.Request, action Action) (string, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return "", fmt.Errorf("%w: no bearer token (a Kubernetes token is required)", ErrUnauthenticated)
	}
	key := cacheKey{sha256.Sum256([]byte(token)), action.String()}
	now := time.Now()
	a.mu.Lock()
	d, hit := a.cache[key]
	a.mu.Unlock()
	if hit && now.Before(d.expires) {
		return d.user, d.err
	}
	user, err := a.review(r.Context(), token, action)
	// Only definite answers are cached, never API server failures.
	if a.cacheTTL > 0 && (err == nil || errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrForbidden)) {
		a.mu.Lock()
		if len(a.cache) > 10000 { // bound memory; entries are cheap to redo
			a.cache = map[cacheKey]decision{}
		}
		a.cache[key] = decision{user: user, err: err, expires: now.Add(a.cacheTTL)}
		a.mu.Unlock()
	}
	return user, err
}

func (a *Authorizer) review(ctx context.Context, token string, action Action) (string, error) {
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
		return "", fmt.Errorf("%w: %s", ErrUnauthenticated, msg)
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			ResourceAttributes: action.Resource, NonResourceAttributes: action.NonResource,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("subject access review: %w", err)
	}
	if !sar.Status.Allowed {
		return u.Username, fmt.Errorf("%w: user %q may not %s", ErrForbidden, u.Username, action)
	}
	return u.Username, nil
}

// Status is the HTTP status for an Authorize error: 401, 403 or 503.
func Status(err error) int {
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	default:
		return http.StatusServiceUnavailable
	}
}

// Require serves h only to requests that may do action; others get 401,
// 403 or 503 with a one-line text body.
func (a *Authorizer) Require(action Action, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := a.Authorize(r, action); err != nil {
			http.Error(w, err.Error(), Status(err))
			return
		}
		h.ServeHTTP(w, r)
	})
}

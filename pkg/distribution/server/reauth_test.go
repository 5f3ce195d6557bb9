package server_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierflow/tierflow/pkg/distribution/server"
)

// jwtLike is a token shaped like a JWT whose payload carries exp.
func jwtLike(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(fmt.Sprintf(`{"sub":"agent","exp":%d}`, exp.Unix()))) + ".sig"
}

// expiringTokens accepts tokens of n1 until their exp claim, as the API
// server does; while unavailable is set it cannot answer at all.
type expiringTokens struct {
	unavailable atomic.Bool
	reviews     atomic.Int32
}

func (a *expiringTokens) Authenticate(_ context.Context, token string) (string, error) {
	a.reviews.Add(1)
	if a.unavailable.Load() {
		return "", fmt.Errorf("%w: connection refused", server.ErrReviewUnavailable)
	}
	exp, ok := server.TokenExpiry(token)
	if !ok || !time.Now().Before(exp) {
		return "", errors.New("token expired")
	}
	return "n1", nil
}

// TestStreamEndsAtTokenExpiry: a stream ends when its token expires, even
// when the API server cannot be asked, and the agent's reconnection with
// the same (expired) token is refused; while the token is valid, an API
// server that cannot answer a re-authentication does not cut the stream.
func TestStreamEndsAtTokenExpiry(t *testing.T) {
	auth := &expiringTokens{}
	e := newEnv(t, auth, server.Options{ReauthInterval: 300 * time.Millisecond})
	populate(e)
	exp := time.Unix(time.Now().Add(4*time.Second).Unix(), 0) // whole seconds, as in the claim
	a := e.startAgent(e.agentConfig("n1", jwtLike(exp), e.addr, ""))
	e.waitConverged(a)

	auth.unavailable.Store(true)
	before := auth.reviews.Load()
	time.Sleep(1500 * time.Millisecond)
	if auth.reviews.Load() <= before {
		t.Fatal("no re-authentication while the stream was open")
	}
	if st := a.Client.Stats(); st.Connections != 1 {
		t.Fatalf("an unavailable API server cut a valid stream: %+v", st)
	}
	for len(e.srv.ConnectedNodes()) > 0 {
		if time.Now().After(exp.Add(3 * time.Second)) {
			t.Fatalf("stream still open %v after its token expired", time.Since(exp))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if time.Now().Before(exp) {
		t.Fatalf("stream cut %v before its token expired", time.Until(exp))
	}
	auth.unavailable.Store(false)
	time.Sleep(time.Second)
	if got := e.srv.ConnectedNodes(); len(got) != 0 {
		t.Fatalf("an expired token reconnected: %v", got)
	}
}

func TestTokenExpiry(t *testing.T) {
	at := time.Unix(1900000000, 0)
	if got, ok := server.TokenExpiry(jwtLike(at)); !ok || !got.Equal(at) {
		t.Errorf("exp %v %v, want %v", got, ok, at)
	}
	for _, tok := range []string{"", "static-token", "a.b.c", "a." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"x"}`)) + ".c"} {
		if got, ok := server.TokenExpiry(tok); ok {
			t.Errorf("%q: exp %v, want none", tok, got)
		}
	}
}

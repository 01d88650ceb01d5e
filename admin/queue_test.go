package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNonBindingBandQueue: in a policy of two buckets where one binds, the
// other's figures are its own. Four calls of 1 request and 100 tokens on
// requests 1/s and tokens 0.1/s (burst 100) get slots 1000 s apart, set
// by tokens; each charges requests at its slot, which pushes the requests
// bucket's schedule to 3000 s from now, so the arithmetic of its state
// alone read as 3000 requests queued, with 3 calls waiting in all (issue
// 42: "67.6 requests queued" with 24 callers). Nothing waits for
// requests: it refills between the slots tokens spaces.
func TestNonBindingBandQueue(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)

	pol := reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: 1, Burst: 1}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 0.1, Burst: 100}},
	}
	req := reserve.Request{Key: "llm", Policy: pol, Cost: reserve.Cost{"requests": 1, "tokens": 100}}
	for i := range 4 {
		r, err := l.ReserveN(ctx, req)
		require.NoError(t, err)
		if i > 0 {
			assert.Equal(t, "tokens", r.Band(), "tokens binds every call after the first")
		}
	}
	require.Eventually(t, func() bool {
		st, err := a.Status(ctx, "llm")
		return err == nil && st.Source == "code"
	}, 10*time.Second, 10*time.Millisecond, "the heartbeat reports the code's policy")
	st, err := a.Status(ctx, "llm")
	require.NoError(t, err)
	require.Len(t, st.Bands, 2)
	assert.Equal(t, "tokens", st.Binding)
	rq, tk := st.Bands[0], st.Bands[1]
	require.Equal(t, "requests", rq.Name)
	require.Equal(t, "tokens", tk.Name)

	// tokens: the 3 calls after the first, 100 tokens each, less what it
	// refilled since the first (0.1 a second: well under one token
	// however slow the machine).
	assert.LessOrEqual(t, tk.Queued, 300.0)
	assert.Greater(t, tk.Queued, 299.0)
	// requests: nothing waits for it; it holds its whole burst when the
	// key frees (its last charge 1000 s before that).
	assert.Equal(t, 0.0, rq.Queued, "requests's own queue, not tokens's")
	assert.Equal(t, 1.0, rq.Spare, "requests holds its burst of 1 when tokens frees the key")
	assert.Equal(t, 1.0, tk.Spare, "tokens, binding, frees a call when it holds one token")
}

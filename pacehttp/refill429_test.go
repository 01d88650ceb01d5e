package pacehttp_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRefill429: a 429 without Retry-After whose headers say OpenAI's quota
// of requests is spent (internal/provider.Window in the openai dialect)
// pauses the key until the reset: whether the quota is a bucket (one call
// back in reset / limit) or a window (all of it at the reset) is not known
// with the counts ignored, nor from a first answer, and pausing reset /
// limit sent a fleet back into the spent window (3,012 refusals in 32 s).
func TestRefill429(t *testing.T) {
	h := map[string]string{
		"x-ratelimit-limit-requests": "50", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "19.5s",
	}
	for _, ignore := range []bool{true, false} {
		ls := fleet(t, 1)
		srv := newServer(t, refusal(provider.OpenAIRefusal, h))
		c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast, MaxRetries: -1, IgnoreCounts: ignore})}
		resp, err := c.Get(srv.URL)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		p := paused(t, ls[0], srv.URL)
		assert.True(t, p > 17*time.Second && p <= 19500*time.Millisecond, "IgnoreCounts %v: paused %v, want until the reset, 19.5 s", ignore, p)
	}
}

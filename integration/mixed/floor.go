package mixed

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"golang.org/x/time/rate"
)

// Floor is the machine's floor for a fleet's figures, measured in the same
// run: callers goroutines of this process sharing one x/time/rate Limiter
// at r per second (burst 1), each call made to a provider of its own as the
// fleet's are, for length. What the provider sees of it is what this
// machine's scheduler and HTTP stack add to a pacer that is exact and in one
// process: its busiest 100 ms is the figure a fleet's is compared with.
func Floor(ctx context.Context, callers int, r float64, length time.Duration) (busiest100, calls int, err error) {
	llm, err := provider.StartLLM(provider.LLMOptions{RPM: 1 << 30, TPM: 1 << 30})
	if err != nil {
		return 0, 0, err
	}
	defer llm.Close()
	const key = "floor"
	lim := rate.NewLimiter(rate.Limit(r), 1)
	ctx, cancel := context.WithTimeout(ctx, length)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers}}
	j := job{Provider: llm.URL(), Key: key}
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for lim.Wait(ctx) == nil {
				_ = post(client, j, 1)
			}
		})
	}
	wg.Wait()
	uses, _ := llm.Uses(key)
	b, _ := busiest(uses, 100*time.Millisecond)
	return b, len(uses), nil
}

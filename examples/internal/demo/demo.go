// Package demo is what the examples share and a reader of any need
// not study: reaching the Redis that -redis names (or embedding one),
// deriving pacer's limit from the provider's,
// printing progress on a timer, and the summary line made from the
// provider's counts. What the examples show about pacer stays in their
// main.go.
package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// RedisFlagUsage is the help text of the examples' -redis flag.
const RedisFlagUsage = "Redis to use: host:port, redis://[user:password@]host:port/db, or rediss://... for TLS; empty: an embedded Redis in this process"

// Redis is the Redis an example runs on.
type Redis struct {
	Client  *redis.Client
	Options *redis.Options // how to reach it: address, credentials, TLS
	URL     string         // how child processes reach it

	embedded *miniredis.Miniredis
}

// Embedded reports whether r is the embedded Redis (miniredis), which runs
// the scripts' Lua in Go, in this process: a large batch takes it far
// longer than a redis-server.
func (r *Redis) Embedded() bool { return r.embedded != nil }

// ParseRedis reads a -redis value: a URL (redis://, rediss:// for TLS,
// unix://) or a bare host:port, taken as redis://host:port. It returns the
// value as a URL, and go-redis's options for it.
func ParseRedis(s string) (string, *redis.Options, error) {
	if !strings.Contains(s, "://") {
		s = "redis://" + s
	}
	opts, err := redis.ParseURL(s)
	if err != nil {
		return "", nil, err
	}
	return s, opts, nil
}

// Connect returns a client to the Redis -redis names (see ParseRedis),
// once a PING has reached it: a wrong -redis fails here, naming the
// address, before any process, server or worker starts. With -redis empty
// it starts an embedded Redis: miniredis, in this process, on a loopback
// port (so the example's child processes reach it too). It says which on
// out, ending the line with forWhat.
func Connect(redisFlag string, out io.Writer, forWhat string) (*Redis, error) {
	if redisFlag == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "no -redis given: using an embedded Redis (miniredis, in this process) at %s%s\n", mr.Addr(), forWhat)
		opts := &redis.Options{Addr: mr.Addr()}
		return &Redis{Client: redis.NewClient(opts), Options: opts, URL: "redis://" + mr.Addr() + "/0", embedded: mr}, nil
	}
	url, opts, err := ParseRedis(redisFlag)
	if err != nil {
		return nil, fmt.Errorf("-redis %q: %w", redisFlag, err)
	}
	// No client tuning here: reserve.New sets what pacer needs on a clone.
	fmt.Fprintf(out, "using Redis at %s%s\n", opts.Addr, forWhat)
	rdb := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("-redis: cannot reach Redis at %s: %w; check the address and that Redis is running there", opts.Addr, err)
	}
	return &Redis{Client: rdb, Options: opts, URL: url}, nil
}

// pingTimeout bounds Connect's check that -redis answers.
const pingTimeout = 5 * time.Second

// PrintWatch prints the run's key prefix and the pacer command that watches
// its keys (cmd/pacer, from the repository's root).
func PrintWatch(out io.Writer, r *Redis, prefix string) {
	fmt.Fprintf(out, "keys under %q: watch them with\n  go run ./cmd/pacer -redis %s -prefix %s watch\n", prefix, r.URL, prefix)
}

// Close closes the client, and stops the embedded Redis if there is one.
func (r *Redis) Close() {
	r.Client.Close()
	if r.embedded != nil {
		r.embedded.Close()
	}
}

// Every calls f every d, from a goroutine of its own, until the returned
// stop is called. stop returns once f is no longer running, and may be
// called more than once. With d <= 0 it does nothing.
func Every(d time.Duration, f func()) (stop func()) {
	if d <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-finished
	}
}

// Summary is a run as the provider saw it.
type Summary struct {
	Calls, Rejected int
	Rate            float64 // achieved calls/s per host, averaged over hosts
	Limit           float64 // pacer's limit per host, calls/s
	Busiest1s       int     // most calls to one host in any 1 s
	Duration        time.Duration
}

func (s Summary) String() string {
	return fmt.Sprintf("summary calls=%d rejected=%d rate=%.2f limit=%g busiest_1s=%d duration=%.1f",
		s.Calls, s.Rejected, s.Rate, s.Limit, s.Busiest1s, s.Duration.Seconds())
}

// Summarize turns the provider's counts after a run of d, paced at rate
// (and burst) per host, into the summary.
func Summarize(st provider.Stats, rate float64, burst int, d time.Duration) Summary {
	s := Summary{Calls: st.Accepted + st.Rejected, Rejected: st.Rejected, Limit: rate, Duration: d}
	var rates float64
	for _, h := range st.ByHost {
		s.Busiest1s = max(s.Busiest1s, h.Busiest1s)
		if span := h.Last.Sub(h.First).Seconds(); span > 0 {
			// The first burst calls come at once; the rest are paced.
			rates += float64(h.Accepted-burst) / span
		}
	}
	if len(st.ByHost) > 0 {
		s.Rate = rates / float64(len(st.ByHost))
	}
	return s
}

// PacerLimit derives pacer's Limit from the provider's: at most
// providerLimit calls in any second. With neither rate nor burst given (0),
// it is reserve.Sliding(providerLimit, time.Second): burst 1 and rate
// providerLimit-1, so that burst + rate × 1 s = providerLimit. A burst alone
// takes the rate providerLimit-burst, a rate alone the burst 1. A Limit
// that lets more than providerLimit into some second is returned with a
// warning: the provider will answer 429s, which is what the flags are for
// showing. It fails if the Limit is invalid.
func PacerLimit(providerLimit int, rate float64, burst int) (reserve.Limit, string, error) {
	if providerLimit < 1 {
		return reserve.Limit{}, "", fmt.Errorf("the provider's limit %d: want at least 1", providerLimit)
	}
	if burst == 0 {
		burst = 1
	}
	if rate == 0 {
		rate = float64(providerLimit - burst)
	}
	lim := reserve.Limit{Rate: rate, Burst: burst}
	if err := lim.Validate(); err != nil {
		return lim, "", err
	}
	var warn string
	if most := float64(burst) + rate; most > float64(providerLimit) {
		warn = fmt.Sprintf("pacer's limit lets up to %g calls into a second (burst %d + rate %g/s), more than the provider's %d: expect 429s", most, burst, rate, providerLimit)
	}
	return lim, warn, nil
}

package pacehttp_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refuseTake is a go-redis hook that fails the next take from a count
// (lua/quota.lua's "take") once armed, as a Redis that cannot be reached
// fails a call (the connection refused), and lets every other command
// through.
type refuseTake struct {
	sha   string
	armed atomic.Bool
}

func newRefuseTake() *refuseTake {
	sum := sha1.Sum([]byte(lua.Quota))
	return &refuseTake{sha: hex.EncodeToString(sum[:])}
}

func (h *refuseTake) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *refuseTake) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 5 && (args[1] == h.sha || args[1] == lua.Quota) && args[5] == "take" && h.armed.CompareAndSwap(true, false) {
			err := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *refuseTake) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCountsAfterOutage: a call that could not reach the count (Redis
// failed its take) but whose slot then came from Redis asks the count
// before it is sent. Before, it went on uncounted, and the count gave its
// call to another: in the combination runner, the processes restarted
// during an OOM asked for their first calls' turns while they could not
// reach Redis, got their slots from Redis once it was back, 8 s later, and
// sent those calls into a window the fleet counted without them (28 calls
// in a window of 24 on http.example, seed 1).
//
// The provider's window holds 2 calls and ends an hour from now. The first
// call brings the count: one left. The second call's take fails, and its
// slot comes from Redis; while it is at the provider, a third call asks
// the count. The provider must receive 2 calls in its window of 2: a count
// of calls, whatever the machine's speed.
func TestCountsAfterOutage(t *testing.T) {
	// A client as reserve.New wants it (else it makes its own, which the
	// hook would not see).
	opts, err := redis.ParseURL(redistest.New(t).URL)
	require.NoError(t, err)
	opts.MaxRetries, opts.ContextTimeoutEnabled, opts.DialerRetries = -1, true, 1
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	refuse := newRefuseTake()
	rdb.AddHook(refuse)
	l, err := reserve.New(rdb, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })

	const quota = 2
	end := time.Now().Unix() + 3600
	var (
		calls  atomic.Int64
		during = make(chan func(), 1) // run in the second call, at the provider
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := calls.Add(1)
		if n == quota {
			select {
			case fn := <-during:
				fn()
			default:
			}
		}
		w.Header().Set("X-RateLimit-Limit", strconv.Itoa(quota))
		w.Header().Set("X-RateLimit-Remaining", strconv.FormatInt(max(0, quota-calls.Load()), 10))
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(end, 10))
		if n > quota {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)

	c := &http.Client{Transport: transport(t, l, pacehttp.Options{Limit: fast, MaxRetries: -1})}
	get := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}
	// The first call, made before any count, brings it: one call left.
	require.NoError(t, get())

	// The second call's take fails; the third is made while the second is
	// at the provider.
	refuse.armed.Store(true)
	third := make(chan error, 1)
	during <- func() { third <- get() }
	require.NoError(t, get(), "the second call")
	assert.False(t, refuse.armed.Load(), "the second call's take was not refused")
	assert.EqualValues(t, quota, calls.Load(), "calls the provider received in its window of %d", quota)
	err = <-third
	_, tooLong := errors.AsType[*reserve.WaitTooLongError](err)
	assert.True(t, tooLong, "the third call: %v, want a *reserve.WaitTooLongError (nothing left until the window's end, an hour away)", err)
}

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/worker"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	errOther    = errors.New("provider down")
	rateLimited = &worker.RateLimitedError{Key: "k", RetryIn: 7 * time.Second}
	wrapped     = fmt.Errorf("handler: %w", rateLimited)
)

func TestIsFailure(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errOther, true},
		{rateLimited, false},
		{wrapped, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, worker.IsFailure(tt.err), "IsFailure(%v)", tt.err)
	}
}

func TestRetryDelay(t *testing.T) {
	task := asynq.NewTask("x", nil)
	assert.Equal(t, 7*time.Second, worker.RetryDelay(3, rateLimited, task))
	assert.Equal(t, 7*time.Second, worker.RetryDelay(3, wrapped, task))
	// asynq.DefaultRetryDelayFunc(0, ...) is 15 s plus up to 29 s of jitter.
	d := worker.RetryDelay(0, errOther, task)
	assert.True(t, d >= 15*time.Second && d < 45*time.Second, "RetryDelay(0, other) = %v, want asynq's default", d)
}

func TestErrorHandler(t *testing.T) {
	assert.Nil(t, worker.ErrorHandler(nil))
	var got []error
	h := worker.ErrorHandler(asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
		got = append(got, err)
	}))
	for _, err := range []error{rateLimited, errOther, wrapped} {
		h.HandleError(context.Background(), asynq.NewTask("x", nil), err)
	}
	assert.Equal(t, []error{errOther}, got)
}

func TestConfig(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		cfg := worker.Config(asynq.Config{Concurrency: 3})
		assert.Equal(t, 3, cfg.Concurrency)
		assert.Equal(t, worker.DelayedTaskCheckInterval, cfg.DelayedTaskCheckInterval)
		assert.Equal(t, worker.TaskCheckInterval, cfg.TaskCheckInterval)
		assert.Nil(t, cfg.ErrorHandler)
		assert.False(t, cfg.IsFailure(rateLimited))
		assert.True(t, cfg.IsFailure(errOther))
		assert.Equal(t, 7*time.Second, cfg.RetryDelayFunc(0, wrapped, nil))
	})
	t.Run("wraps the caller's", func(t *testing.T) {
		var reported []error
		cfg := worker.Config(asynq.Config{
			DelayedTaskCheckInterval: 2 * time.Second,
			TaskCheckInterval:        time.Second,
			IsFailure:                func(err error) bool { return !errors.Is(err, errOther) },
			RetryDelayFunc:           func(int, error, *asynq.Task) time.Duration { return time.Minute },
			ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
				reported = append(reported, err)
			}),
		})
		assert.Equal(t, 2*time.Second, cfg.DelayedTaskCheckInterval)
		assert.Equal(t, time.Second, cfg.TaskCheckInterval)
		assert.False(t, cfg.IsFailure(rateLimited))
		assert.False(t, cfg.IsFailure(errOther), "the caller's IsFailure decides other errors")
		assert.True(t, cfg.IsFailure(errors.New("x")))
		assert.Equal(t, 7*time.Second, cfg.RetryDelayFunc(0, rateLimited, nil))
		assert.Equal(t, time.Minute, cfg.RetryDelayFunc(0, errOther, nil))
		cfg.ErrorHandler.HandleError(context.Background(), nil, rateLimited)
		cfg.ErrorHandler.HandleError(context.Background(), nil, errOther)
		assert.Equal(t, []error{errOther}, reported)
	})
}

// TestNewValidates: New refuses a nil Limiter and Options that cannot
// work, with an error wrapping ErrInvalidOptions.
func TestNewValidates(t *testing.T) {
	l := deadLimiter(t)
	pace := worker.PerType(map[string]reserve.Limit{"x": {Rate: 1, Burst: 1}})
	tests := []struct {
		name string
		opts worker.Options
		ok   bool
	}{
		{"zero", worker.Options{}, false},
		{"pace", worker.Options{Pace: pace}, true},
		{"negative lead means none", worker.Options{Pace: pace, Lead: -1}, true},
		{"negative MaxSleep", worker.Options{Pace: pace, MaxSleep: -1}, false},
		{"negative RetryAfter", worker.Options{Pace: pace, RetryAfter: -1}, false},
	}
	for _, tt := range tests {
		_, err := worker.New(l, tt.opts)
		if tt.ok {
			assert.NoError(t, err, tt.name)
		} else {
			assert.ErrorIs(t, err, worker.ErrInvalidOptions, tt.name)
		}
	}
	_, err := worker.New(nil, worker.Options{Pace: pace})
	assert.ErrorIs(t, err, worker.ErrInvalidOptions, "nil Limiter")
}

// deadLimiter is a Limiter whose Redis refuses connections: enough for
// tests that never reach it.
func deadLimiter(t *testing.T) *reserve.Limiter {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rdb.Close() })
	l, err := reserve.New(rdb, reserve.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), HeartbeatInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

func TestPerType(t *testing.T) {
	lim := reserve.Limit{Rate: 5, Burst: 2}
	pace := worker.PerType(map[string]reserve.Limit{"email:send": lim})
	p, ok := pace(asynq.NewTask("email:send", nil))
	require.True(t, ok)
	assert.Equal(t, reserve.Single("email:send", lim, 1), p)
	_, ok = pace(asynq.NewTask("other", nil))
	assert.False(t, ok)
}

func TestTooManyRequestsPassesOthers(t *testing.T) {
	for _, status := range []int{200, 404, 500, 503} {
		assert.NoError(t, worker.TooManyRequests(context.Background(), status, "5"), "status %d", status)
	}
	assert.ErrorIs(t, worker.TooManyRequests(context.Background(), 429, "5"), worker.ErrNotPaced)
	assert.ErrorIs(t, worker.Pause(context.Background(), time.Second), worker.ErrNotPaced)
}

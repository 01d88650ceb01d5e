package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// Timeouts of the connection to Redis, unless the URL sets its own
// (dial_timeout=, read_timeout=, ...).
const (
	dialTimeout = 2 * time.Second
	callTimeout = 5 * time.Second
)

// parseRedis reads a -redis value: a URL (redis://, rediss:// for TLS,
// unix://) or a bare host:port, taken as redis://host:port. As
// examples/internal/demo.ParseRedis does.
func parseRedis(s string) (*redis.Options, error) {
	if !strings.Contains(s, "://") {
		s = "redis://" + s
	}
	opts, err := redis.ParseURL(s)
	if err != nil {
		// url.Error quotes the URL, password included: leave it out.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, err
	}
	return opts, nil
}

// connect makes the client and the Admin, and checks that Redis answers.
// Commands call it once their arguments are checked.
func (c *cli) connect(ctx context.Context) error {
	if c.redisURL == "" {
		c.redisURL = os.Getenv("REDIS_URL")
	}
	if c.redisURL == "" {
		return usagef("no Redis given: pass -redis URL (redis://host:port/db, rediss://... or host:port) or set REDIS_URL")
	}
	if c.heartbeat != 0 && c.heartbeat < time.Millisecond {
		return usagef("-heartbeat %v: want the fleet's reserve.Options.HeartbeatInterval, at least 1ms (0: the default, 1s)", c.heartbeat)
	}
	opts, err := parseRedis(c.redisURL)
	if err != nil {
		return usagef("-redis: %v (want redis://host:port/db, rediss://... or host:port)", err)
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = dialTimeout
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = callTimeout
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = callTimeout
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = -1 // a change is sent once: never twice in the history
	}
	if opts.DialerRetries == 0 {
		opts.DialerRetries = 1 // one dial of DialTimeout, not five
	}
	opts.ContextTimeoutEnabled = true
	opts.PoolSize = 4
	redis.SetLogger(quietLogger{}) // errors are reported, one line each
	rdb := redis.NewClient(opts)
	ac, err := admin.New(rdb, admin.Options{KeyPrefix: c.prefix, HeartbeatInterval: c.heartbeat})
	if err != nil {
		_ = rdb.Close()
		return usagef("-prefix %q: %v", c.prefix, err)
	}
	pctx, cancel := context.WithTimeout(ctx, opts.DialTimeout+time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return fmt.Errorf("cannot reach Redis at %s: %v", opts.Addr, err)
	}
	c.rdb, c.admin, c.addr = rdb, ac, opts.Addr
	return nil
}

func (c *cli) close() {
	if c.rdb != nil {
		_ = c.rdb.Close()
	}
}

// keyError says what went wrong with key in words an operator can act on.
func (c *cli) keyError(op, key string, err error) error {
	switch {
	case errors.Is(err, admin.ErrUnknownKey):
		return wrapped{fmt.Sprintf("%s: unknown key %q: no state, no stored limit and no live Limiter reports it under prefix %q", op, key, c.prefix), err}
	case errors.Is(err, reserve.ErrWrongType):
		return wrapped{fmt.Sprintf("%s: key %q is not pacer's: Redis key %q (or one beside it) holds a value of another type or format", op, key, c.redisKey(key)), err}
	case errors.Is(err, reserve.ErrUnavailable):
		return fmt.Errorf("%s: key %q: Redis at %s failed: %w", op, key, c.addr, err)
	case errors.Is(err, reserve.ErrReservedKey), errors.Is(err, reserve.ErrEmptyKey):
		// admin refused the name before sending anything: a bad command
		// line (exit 2, and 400 from pacer web).
		return &usageError{msg: fmt.Sprintf("%s: key %q: %v", op, key, err), err: err}
	}
	return fmt.Errorf("%s: key %q: %w", op, key, err)
}

// wrapped is an error that says msg and wraps err (which msg says in its
// own words).
type wrapped struct {
	msg string
	err error
}

func (w wrapped) Error() string { return w.msg }
func (w wrapped) Unwrap() error { return w.err }

var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// redisKey is the Redis key of key's state, as reserve names it.
func (c *cli) redisKey(key string) string {
	prefix := c.prefix
	if prefix == "" {
		prefix = reserve.DefaultKeyPrefix
	}
	return prefix + "{" + keyEscaper.Replace(key) + "}"
}

// quietLogger silences go-redis's own log lines (a failed dial is logged
// before the error is returned, and reported then).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

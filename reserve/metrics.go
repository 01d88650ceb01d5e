package reserve

import "time"

// Metrics receives a Limiter's measurements. Implementations must be safe for
// concurrent use and fast: they are called on every operation. Package
// prommetrics provides one for Prometheus.
//
// Keys are passed as given; a crawler may have millions of them, so an
// implementation should not turn them into labels unless told to.
type Metrics interface {
	// Reserved is called for every reservation granted: n permits on key,
	// to be used after wait. local is true when it was granted by the local
	// fallback rather than Redis.
	Reserved(key string, n int, wait time.Duration, local bool)
	// RedisCall is called after every call to Redis: the operation
	// ("reserve", "cancel", "pause", "peek", "heartbeat", "probe"), its duration and
	// its error (nil on success).
	RedisCall(op string, d time.Duration, err error)
	// Fallback is called on every switch: active is true when the Limiter
	// starts pacing locally, false when it is back on Redis.
	Fallback(active bool)
	// Paused is called when key is paused for d.
	Paused(key string, d time.Duration)
}

type noMetrics struct{}

func (noMetrics) Reserved(string, int, time.Duration, bool) {}
func (noMetrics) RedisCall(string, time.Duration, error)    {}
func (noMetrics) Fallback(bool)                             {}
func (noMetrics) Paused(string, time.Duration)              {}

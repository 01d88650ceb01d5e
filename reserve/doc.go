// Package reserve paces a fleet of processes against a shared rate limit kept
// in Redis, by reservation instead of rejection.
//
// Each caller asks Redis for the next free slot on a key (a bucket); a Lua
// script hands slots out in order, spaced 1/rate apart, and returns how long
// to wait. The caller sleeps until its slot (Limiter.Wait) or reschedules its
// job to it (Limiter.Reserve), so the provider behind the key sees a smooth
// stream at the configured rate and peaks become a queue rather than errors.
//
// One key behaves exactly like golang.org/x/time/rate's Limiter driven with
// ReserveN at the same times, with Redis server time as the clock: a key
// starts full with Burst permits, refills at Rate per second, and each caller
// pays for its own permits. Limiter.Pause implements a provider's 429
// Retry-After for the whole fleet; Reservation.Cancel gives permits back.
//
// When Redis is slow or gone, a Limiter keeps pacing on a local
// golang.org/x/time/rate limiter per key, at the key's rate divided by the
// number of live Limiters in the fleet (learned from heartbeats), and goes
// back to Redis by itself when a probe finds it; Options.FailClosed returns
// ErrUnavailable instead. Every call to Redis is bounded by
// Options.CallTimeout. Close stops the Limiter's background goroutine.
//
// Concurrent callers on one key in one process share Redis round trips
// (coalescing; Options.DisableCoalescing), and sleeps end within tens of µs
// of their slot on Linux instead of Go timers' millisecond
// (Options.PreciseWake).
//
// Use it when several processes (job workers, crawlers, batch pipelines) share
// one third-party quota. Within a single process, golang.org/x/time/rate
// alone is enough.
//
// See the package examples.
package reserve

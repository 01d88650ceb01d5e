// Package outage holds the timing rules of a Limiter's switch to local
// pacing (docs/design.md, "When Redis fails"): package reserve applies
// them, and the tests that judge an outage bound their checks with the same
// functions, so the two cannot drift apart.
package outage

import "time"

const (
	// DefaultCallTimeout is Options.CallTimeout's default.
	DefaultCallTimeout = 250 * time.Millisecond
	// DefaultHeartbeatInterval is Options.HeartbeatInterval's default.
	DefaultHeartbeatInterval = time.Second
	// MaxCallTimeout bounds the call timeout a Limiter learns from slow
	// round trips (unless CallTimeout is longer).
	MaxCallTimeout = 2 * time.Second
)

// ConfirmBudget is how long a ping after a timed-out call may take before
// Redis counts as gone: eight call timeouts, at least 2 s. callTimeout is
// Options.CallTimeout.
func ConfirmBudget(callTimeout time.Duration) time.Duration {
	return max(2*time.Second, 8*callTimeout)
}

// ProbeBudget bounds a probe's duration, and so a heartbeat's deadline: the
// heartbeat and, after a timeout, the ping that decides. now is the call
// timeout in force (it grows on slow round trips, up to MaxCallTimeout),
// callTimeout is Options.CallTimeout.
func ProbeBudget(now, callTimeout time.Duration) time.Duration {
	return 2*now + ConfirmBudget(callTimeout)
}

// Settle is how long the fleet takes to hear a member's mode: two
// heartbeat intervals.
func Settle(heartbeatInterval time.Duration) time.Duration {
	return 2 * heartbeatInterval
}

// HeldBySilence is how long a Limiter pacing locally must have been silent
// for the others to hold it by its silence: two intervals, a settle, and
// one more for them to hear it, +10% (8/5 of a settle).
func HeldBySilence(settle time.Duration) time.Duration {
	return settle * 8 / 5
}

// FirstLocalSlot bounds how long after its switch to local pacing a
// Limiter may wait for its first local slot when a heartbeat of its saying
// "redis" was under way at the switch: that heartbeat's deadline (a probe's
// budget at most) and then until the fleet holds it by its silence. now is
// the call timeout in force, callTimeout and heartbeatInterval the
// Options'. A Limiter whose last heartbeat ended before the switch takes
// local slots at once.
func FirstLocalSlot(now, callTimeout, heartbeatInterval time.Duration) time.Duration {
	return ProbeBudget(now, callTimeout) + HeldBySilence(Settle(heartbeatInterval))
}

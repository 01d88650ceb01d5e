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
// When Redis is gone, a Limiter paces each key locally with Redis's own
// scripts, run in the process, at its own share of every band (its rank
// among the fleet's members, learned from heartbeats: the members' shares
// add up to the limit), continuing the schedule Redis last showed it, and
// goes back to Redis by itself when a probe finds it, handing over what it
// granted meanwhile; Options.FailClosed returns ErrUnavailable instead. An
// outage is never an error to a caller who can wait: one that has no share
// to pace on waits for Redis, and one with a maximum wait is refused as any
// other maximum's (OutageBinding). A slow Redis is not an outage: a call that
// times out (Options.CallTimeout) switches nothing until Redis also fails
// to answer a ping. Close stops the Limiter's background goroutines and
// gives its share back to the fleet.
//
// New reaches Redis once before it returns; a first call that only times
// out waits for a ping too, as any call does, so a loaded machine is not
// taken for an outage at start. With Options.RequireRedis (the
// quick start in README.md, the package Example, sets it) New fails when
// Redis does not answer, with an error that matches ErrUnavailable, names
// the address and says what to check: a wrong address shows at start.
// Without it New cannot tell a wrong address from an outage: it returns the
// Limiter and logs a warning naming the address, and the Limiter paces
// locally on Options.FleetSize's share (without FleetSize, its callers wait
// for Redis, and those with a maximum wait are refused when it passes,
// with a WaitTooLongError naming OutageBinding) until
// Redis answers. Leave RequireRedis off, and set
// FleetSize, where processes must start during an outage. go-redis logs
// each failed dial itself, to stderr; RedisLogger sends those lines to slog
// at Debug level, below pacer's own (go-redis's logger is global to the
// process, so pacer leaves setting it to main).
//
// Concurrent callers on one key in one process share Redis round trips
// (coalescing; Options.DisableCoalescing); a key so hot that callers queue
// leases a run of consecutive slots in one call and hands them out locally,
// each exactly the slot a call of its own would have had
// (Options.LeaseSpan); and sleeps end within tens of µs of their slot on
// Linux instead of Go timers' millisecond (Options.PreciseWake).
//
// # Several limits, costs known after the call
//
// A Policy is the limits every call on a key must satisfy at once (requests
// and tokens per minute, an hourly quota), each a Band charging one unit of
// the call's Cost. Limiter.ReserveN reserves one slot, the earliest
// every band allows, on all bands in one atomic step; Reservation.Settle
// replaces the estimated cost with the actual one once the call has told
// it. A single Limit is the one-band case.
//
// # A provider's quota, written as the provider states it
//
//   - N calls in any window W (a sliding window, or a strict "N per
//     second"): Sliding(N, W), burst 1 and rate (N-1)/W, so that
//     burst + rate × W = N.
//   - N per minute, hour or day, reset on the minute, hour or day (GitHub's
//     5,000 an hour): a Window band, Window{N: N, Length: time.Hour}, exact; set its
//     Origin to the provider's reset time when its windows start elsewhere.
//   - N per minute, replenished continuously (OpenAI's and Anthropic's
//     requests and tokens per minute: a bucket that holds a minute's
//     quota): Limit{Rate: N/60, Burst: B} with B <= N. A B well below N
//     leaves the rest of the provider's bucket as a margin for costs
//     settled after the call.
//   - Weighted calls (GitHub's secondary limit of 900 points a minute, a GET
//     1 point and a POST 5): a band with Unit "points", and each call's
//     Cost.
//
// When a call's cost is known only after it, reserve the least it can cost
// and Settle the actual: the fleet pays for every unit, and a band runs
// ahead of its schedule by at most the unsettled rest of the calls in
// flight, which the provider's margin must hold. Reserving the most never
// runs ahead, but what a call does not use goes back only where later
// reservations have not built on it, so under a queue it is lost.
// examples/llm measures both against a fake LLM API (docs/demos.md).
//
// # Limits changed without a deploy
//
// An operator may store a key's limit in Redis (admin.Client.SetLimit, or
// cmd/pacer set): every Limiter of the fleet reserves under it from its next
// reservation on, read by the script atomically with the key's state, with
// no client cache to expire. A stored limit replaces the bands of the
// code's policy that it names, and only those: the others stay in force, and
// every band keeps its queue and its windows across a set and an unset.
// Slots already granted keep their places: a raised limit applies to the
// slots granted after the change (those already queued drain at the old
// rate first), a lowered one once the queue granted before it has drained.
// In shadow mode the stored limit is only counted: the code's limit is
// enforced and admin.Client.Status tells how many calls the stored one
// would have delayed, and by how much. Every change is kept in the key's
// history (who, when, why, before and after). Limiters report their code's
// policies and their mode (on Redis, or pacing locally) with their
// heartbeat, so admin.Client.Status and Fleet can show them.
//
// # Fair share and lanes
//
// Many tenants may share one quota. A Request that names a Tenant, or a
// Lane other than Normal, is fair: the tenants waiting on a key share its
// capacity by Weight, an Urgent request goes before Normal ones and those
// before Batch ones (Options.MinShare keeps a lower lane from starving),
// and a tenant alone gets the whole rate. A fair request is booked only in
// its turn, and at most one slot interval ahead (Options.FairHorizon), so
// that a newcomer waits at most about two slot intervals behind any
// backlog; plain requests on the same key book with no horizon, and a fair
// one deferred behind them is booked at its next ask in its turn, wherever
// its slot lies. It waits longer than it would first come, first served,
// and is never refused for it; the limits themselves are kept exactly as
// for any call. The rule and its guarantees are in docs/design.md, "Fair
// share and lanes".
//
// # Packages built on reserve
//
// Package admin is the operator's view and controls (cmd/pacer is built on
// it); package hold keeps slots for a job queue's jobs (packages worker and
// scheduler, for asynq, share it); package adaptive learns a rate the
// provider does not publish (package pacehttp uses it). They reach the
// Limiter's path to Redis through it, and add nothing to its API.
//
// Use it when several processes (job workers, crawlers, batch pipelines) share
// one third-party quota. Within a single process, golang.org/x/time/rate
// alone is enough.
//
// See the package examples.
package reserve

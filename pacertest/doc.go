// Package pacertest tests code that uses pacer without Redis and without
// waiting: a real *reserve.Limiter on an in-process Store, a Recorder of
// the slots it grants, and a fake rate-limited Provider.
//
// New (or Store.NewLimiter) returns a Limiter that keeps its keys in
// memory and runs pacer's own scripts on them, in-process, as Redis runs
// them: the same scripts, the same code from the call to the slot, held to
// Redis by a differential test. It runs on time.Now and Go's timers, so in
// a testing/synctest bubble its time is the bubble's: a Wait's sleep to
// its slot takes no wall time, and an hour of pacing at 10/s (36,000 Waits) passes in a
// couple of seconds of wall time, most of it the scripts' runs on
// gopher-lua (TestHour logs how long). Code that takes a *reserve.Limiter (or a
// pacehttp.Transport built on one) is tested unchanged. Make the Limiter
// inside the test's bubble, synctest.Test(t, func(t *testing.T) { ... }),
// as the Example would be in a test.
//
// A Recorder (a reserve.Tracer) records every Wait: its key, cost, slot,
// when it woke and what it returned. Schedule, CheckSchedule and
// CheckWindow compare slots with a schedule, to the nanosecond, or bound
// how many lie in any window. A Provider is an http.Handler that answers
// 429 with Retry-After to requests over its Limit per sliding Window; its
// Transport serves it in-process, with no network, so that a
// pacehttp.Transport's calls to it run in a bubble too.
//
// # The same schedule
//
// A Limit on the kit's Limiter behaves like golang.org/x/time/rate's
// Limiter created with NewLimiter(Rate, Burst), as on Redis: each slot is
// that rule's in exact arithmetic, rounded up to the nanosecond. x/time/rate
// computes in float64 and truncates to the nanosecond, so the two are the
// same instant, to the nanosecond, whenever x/time/rate's arithmetic is
// exact: rates that are powers of two up to 512/s with instants on a grid
// of 1/512 s, for one. On the microsecond grid (an interval of a whole
// number of microseconds, instants on whole microseconds), the slots are
// on that grid too, and x/time/rate's may be 1 ns earlier. Tests compare
// 7,200 random reservations each way (xrate_test.go). Each reservation is
// made at the instant of its call when Options.DisableCoalescing is set;
// without it, a lone caller on a key whose queue is 2 ms deep or more holds
// its call up to 500 µs for callers coming meanwhile, and in a bubble that
// moves the instant its slot is computed from.
//
// # What differs from Redis
//
// The Limiter is a fleet of one: it sends no heartbeats and takes the whole
// of every key; several Limiters on one Store share its keys, as processes
// share a Redis (without Redis's events: a pause one makes reaches the
// others' sleepers at their check just before their slots). An in-flight
// band's seats (Band.InFlight: Acquire, then Done) are held on the Store,
// for as long as the call stays open. The Store is never unavailable, so there is no local
// fallback, and the options about Redis and the fleet have no effect. Its
// time is the client's (Options.ClientTime), and it sleeps on Go's timers
// (Options.PreciseWake has no effect). It starts no goroutine of its own,
// so a bubble ends without Close; New closes it when the test ends anyway.
// A Peek of a bucket at exactly zero reports 0 where Redis reports -0
// (equal numbers).
//
// pacertest imports no test-only module (no miniredis, testify or
// testcontainers): its dependencies are reserve's.
package pacertest

// Package combo is the combination runner (issue 21, item 3): one seeded
// scenario, on a real redis-server, with several OS processes, that draws a
// random mix of everything pacer does and everything that can go wrong at
// once, and judges the run by what an independent provider saw.
//
// A scenario (Generate) is a timeline drawn from math/rand/v2's PCG seeded
// by the seed: operator actions (admin.Client's SetLimit enforced or in
// shadow, UnsetLimit, Pause, Resume), the provider's own pauses (a 429 with
// Retry-After to the next call), and faults (Redis stopped and restarted
// empty, frozen with SIGSTOP, out of memory, CLIENT PAUSE, a fleet process
// SIGKILLed and started again). Run plays it against:
//
//   - a fleet of child processes (Child), each built as the README's quick
//     start builds its client, calling Wait, Reserve, TryReserveN and their
//     policy variants from many goroutines on four keys (keys.go): a
//     Sliding limit, a policy of a bucket, a window and a tokens bucket with
//     costs settled to what the provider reports, a hot key that leases,
//     and a key called through pacehttp's Transport whose window the fleet
//     is not told of and learns from the provider's counts;
//     three in ten of the first two keys' calls are fair (a tenant of three,
//     weights 1, 1 and 2, and a lane: Urgent, Normal or Batch);
//   - the provider (Provider), an HTTP server in a process of its own that
//     enforces the true limits on arrival, answers 429 with Retry-After,
//     reports the pacehttp key's window in GitHub's x-ratelimit-* headers,
//     and records every call with the slot the caller's reservation gave it.
//
// Judge then checks the records (verdict.go): no interval of the run over
// any band's limit, judged on the slots (and for a band the fleet is not
// told of, no refusal over it, on the provider's view); no call inside a
// pause it was told of; throughput at least an honest fraction of what the
// limit allowed; no error; no call fired early. A failing seed replays with the same timeline:
//
//	go run ./integration/cmd/pacercombo -seed 17 -v
//
// The binary that runs the runner must call Main first thing (in main or
// TestMain): the children and the provider are that binary, re-run.
package combo

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
// SIGKILLed and started again). Wider draws (widen.go), each from a random
// stream of its own so that the first draws' timeline stays as it was, add
// what those never made: Redis faults in the first seconds after the fleet
// starts, and after two or three processes killed and started together;
// an operator's set and unset followed by Redis restarted empty; a long
// pause resumed within a second (at times with a Redis fault just after);
// a fleet process, or the whole fleet, told to Close while it paces
// locally, and new ones started right after the fault; a process's own
// Limiter.Pause made in a Redis fault and lasting past it; CPU hogs beside
// the fleet (three or four per CPU, from its start or later); a fleet
// process stopped with SIGSTOP; more pauses of the pacehttp key. Last,
// half the seeds draw a slow Redis (slow.go): for a while every reply
// reaches the fleet late, or every command reaches Redis late, through
// proxies, for the whole fleet or one process's link. Run plays it
// against:
//
//   - a fleet of child processes (Child), each built as the README's quick
//     start builds its client, calling Wait, Reserve, TryReserveN and their
//     policy variants from many goroutines on seven keys (keys.go): a
//     Sliding limit, a policy of a bucket, a window and a tokens bucket with
//     costs settled to what the provider reports, a hot key that leases,
//     a key called through pacehttp's Transport whose window the fleet
//     is not told of and learns from the provider's counts, and a key
//     called through a second Transport built with Options.Adaptive, whose
//     limit (20/s, burst 2) the fleet is told nothing of and learns a rate
//     for (within [2, 80]/s) from the provider's 429s, a third of its calls
//     with a deadline of their own (pacehttp refuses those whose slot
//     cannot come before it);
//     three in ten of the first two keys' calls are fair (a tenant of three,
//     weights 1, 1 and 2, and a lane: Urgent, Normal or Batch); and a sixth
//     key called by fair requests only (fairkey.go): two tenants of equal
//     weight always backlogged, one estimating its tokens low and one
//     high, settled to the same actual costs, and a light tenant per
//     process, half its calls with a deadline of their own; and a seventh,
//     a bucket of 20/s called by a crowd of 12 fair tenants backlogged in
//     every process, more queues than one call of the fair script carries;
//   - Python processes among them (python.go): a seed draws none, one or
//     two of the fleet's three slots (at least one stays Go), and every
//     process started in such a slot runs the Python client
//     (clients/python, on /usr/bin/python3 with redis-py and lupa;
//     clients/python/tests/combo_child.py). It calls the keys that
//     client supports, the Sliding key and the policy key (wait,
//     reserve then sleep, reserve with a maximum wait, cancel; costs
//     settled to what the provider reports), from eight threads, sends
//     the provider each call with the slot its reservation gave
//     (Reservation.slot_ns, on Redis's clock or the local fallback's
//     estimate of it, as the Go children's), pauses a key on a 429, and
//     takes the same commands (close, pause); kills, SIGSTOP and the
//     restarts in its slot reach it as any process. What the client
//     lacks it does not call: fair turns (tenants, lanes), leases,
//     deadlines of a call's own, Allow, pacehttp (the hot, http, adaptive
//     and fair keys are the Go processes'). Its calls are judged as the
//     Go processes' are, by every judge below. Without such a python3
//     the draw is skipped (Go processes run in those slots, and the
//     seed's line says "python skipped"); under CI that is a failure.
//     PACER_COMBO_PYTHON=off skips it on purpose, to tell whether a
//     failure needs the Python processes;
//   - a seventh key with an in-flight band (seats.go, issue 41), KeySeats:
//     N drawn per seed (3 to 6), alone or beside a bucket or a window, called
//     by the Go processes with Acquire and Done, ReserveN, Sleep and
//     Settle, TryReserveN, and reservations given back before their slot,
//     each call held by the provider 10 ms to 30 s; the provider refuses a
//     call over N open (from its arrival to the end of its response, or
//     its caller's connection closing), and the runner reads the key's
//     seats hash through the run (seatwatch.go);
//   - the provider (Provider), an HTTP server in a process of its own that
//     enforces the true limits on arrival, answers 429 with Retry-After,
//     reports the pacehttp key's window in the seed's dialect (dialect.go)
//     and answers its 429s with the seed's body (body.go: OpenAI's error,
//     or Google's RetryInfo with no header at all), and records every call with the slot the caller's reservation gave it
//     (for a call through pacehttp, the slot it was sent on, which the
//     child's hook.Sending sees and its Base sends in a header).
//
// The operator stores no limit on the adaptive key: a stored limit
// replaces the learned rate (its band, "permits", is the one the Transport
// reserves on), and no exact bound on that key's slots could judge it
// (learned.go). Its pauses, the operator's and the provider's, are drawn.
//
// Judge then checks the records (verdict.go): no interval of the run over
// any band's limit, judged on the slots (and for a band the fleet is not
// told of, no refusal over it, on the provider's view; for the pacehttp
// key, the rate it is told of on the sends too: sends.go); no call inside a
// pause it was told of, a pause made on a process's local engine binding
// the others once its maker is back on Redis, and a pacehttp call judged
// on its send as well as its slot; throughput at least an honest fraction
// of what the limit allowed, and no stall of seconds on such a key
// (stalls.go); no error, no ErrUnavailable to a caller who could wait
// (outage.go), no wait of seconds refused with no pause in force
// (waits.go), no call held to the end of a pause the operator resumed
// (resume.go); no switch to local pacing with Redis healthy (outage.go);
// the stored limits read after each restart and at the end as the
// operator last left them (stored.go); the fair key's equal tenants within
// 1.5 times of each other on actual tokens, and no refusal of a light
// tenant with nothing in the way (fairness.go); on KeySeats, no call over
// N open at the provider, and no seats left held or waiting by a process
// that ended by itself, in its Limiter or in Redis (seatjudge.go, which
// also reports how soon a killed holder's seats came back); no call fired
// early. The
// adaptive key is judged by its own invariants (learned.go): no request
// reaches the provider twice, nor one pacehttp refused before sending it;
// every sample of the learned rate lies within [Min, Max]; and outside
// Redis faults and pauses no 2 s pass without a call the provider
// accepted. Its refusals and the fraction of its true limit it used are
// reported, not judged. A failing seed replays with the same timeline:
//
//	go run ./integration/cmd/pacercombo -seed 17 -v
//
// With Config.Cluster (pacercombo -cluster) the same seeds run on a Redis
// Cluster of three masters, for two seeds in five with a replica each
// (cluster.go): every process's
// Limiter on a redis.ClusterClient with go-redis's defaults (its script
// calls pipelined per master), the operator and the runner's reads on one
// too, the keys and the fleet's records on the masters their hash slots
// give them (Result.Placement), and each Redis fault striking one master,
// drawn per seed (Event.Node), while the others serve: restarted empty
// (the same node and slots, no data), frozen, out of memory, or paused
// (with a replica, a master stopped or frozen past the node timeout fails
// over). Reshardings move a master's slots of the run's keys under load,
// and failovers hand a master's slots to its replica; neither is a Redis
// fault to the judges. Such a run leaves out the slow Redis and the
// Python processes (Scenario.ForCluster says why), and is judged by the
// same judges.
//
// The binary that runs the runner must call Main first thing (in main or
// TestMain): the children, the provider and the CPU hogs are that binary,
// re-run.
package combo

// Package worker paces asynq task handlers against a rate limit shared by
// every server of the fleet, with reserve.Limiter.
//
// Middleware gives each paced task a slot on its key. A short wait is slept
// in the handler; a long one reschedules the task to its slot through asynq's
// own retry mechanism, without counting a retry, and the slot is kept for the
// task (by task ID) so that it uses it when it runs again instead of taking a
// second one. Tasks with no retries left, which asynq archives on any error,
// always sleep instead. Pause and TooManyRequests let a handler that got a
// 429 from the provider pause the key for the whole fleet.
//
// # Setting up the server
//
// Config sets up asynq.Config, and New's Middleware paces the handlers (the
// package's Example has the whole server):
//
//	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "localhost:6379"},
//		worker.Config(asynq.Config{Concurrency: 50}))
//	pacer, err := worker.New(limiter, worker.Options{
//		Pace: worker.PerType(map[string]reserve.Limit{"crawl": {Rate: 20, Burst: 5}}),
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	mux := asynq.NewServeMux()
//	mux.Use(pacer.Middleware)
//
// Config makes a rate-limit reschedule neither a failure (IsFailure: no retry
// is counted) nor an error to report (ErrorHandler), reschedules it to its
// slot (RetryDelayFunc), and shortens two asynq intervals unless they are
// set: DelayedTaskCheckInterval to 250 ms and TaskCheckInterval to 100 ms.
// IsFailure, RetryDelay and ErrorHandler are there for a Config you build
// yourself.
//
// # Why the intervals matter
//
// asynq keeps retry times in whole seconds and moves due tasks to their queue
// every DelayedTaskCheckInterval (default 5 s); an idle server looks for new
// tasks every TaskCheckInterval (default 1 s). A rescheduled task therefore
// comes back up to DelayedTaskCheckInterval + 1.5 TaskCheckInterval after it
// was due. Options.Lead (default 500 ms) makes it due that much early and the
// handler sleeps the rest, so the calls keep the spacing the limit asks for.
// Because of the whole seconds, handlers that came back sleep on average
// about Lead + 0.5 s: about Rate * 1 s handlers per key are asleep at any
// moment, however deep the backlog and however many workers there are (with
// sleeping alone, every worker holding a paced task sleeps). Give the fleet
// at least Rate * (Lead + 1 s) workers for each paced key (30 at 20/s):
// with fewer, returning tasks wait for a free worker, come back late and run
// together. With asynq's default intervals, set Options.Lead to about 7 s
// instead.
//
// # Slots kept for tasks
//
// A slot kept for a task lives in Redis beside the key's bucket (see
// package hold). When the task comes back early it sleeps the remainder; a
// little late (up to hold.Options.StaleAfter: by default half the
// slot spacing) it runs at once; later than that the slot is dropped and a
// fresh one taken, so a backlog left by workers that were down drains at the
// rate, never as a burst. A slot nobody comes back for (the task was
// deleted) expires StaleAfter after its time. Package scheduler keeps slots
// the same way for tasks it enqueues, and the middleware redeems them.
//
// # Tenants and lanes
//
// A task whose Pace returns a fair reserve.Request (a Tenant, a Lane or a
// Weight: reserve.Request.Fair) shares its key with the other tenants by
// weight, and a higher lane goes first. No slot is kept ahead for it: it is
// booked only in its tenant's turn, so a tenant's backlog of 10,000 tasks
// holds no slots that another tenant's task could use. A turn further than
// MaxSleep away reschedules the task to about when it comes, and it asks
// again then; package scheduler enqueues fair tasks due at once for the
// same reason. A rescheduled task rejoins its tenant's queue when it comes
// back: asynq brings the tasks due in one second back in ID order.
//
// # In flight
//
// A policy may hold an in-flight band (reserve.Band.InFlight): at most N
// of the key's tasks run their handlers at once, fleet-wide (an LLM's open
// streams, a host's connections):
//
//	policy := reserve.Policy{
//		{Name: "streams", Unit: "requests", InFlight: 8}, // at most 8 open at once
//		{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 5, Burst: 5}},
//		{Name: "tpm", Unit: "tokens", Limit: reserve.Limit{Rate: 20000.0 / 60, Burst: 20000}},
//	}
//
// The middleware sleeps until the task's slot on the other bands (kept for
// it, or fresh, as above), then takes its seat, its Cost's amount for the
// band's unit, waiting in the key's queue in order for at most as long as
// it may sleep; then it sleeps to its slot again, which a pause made
// meanwhile, or a slot passed too long ago (reserve.Options.MaxLateness),
// moves. The handler runs holding the seat, which goes back when it
// returns, fails or panics: a retry takes a seat again. A task that finds
// no seat within MaxSleep is rescheduled (a *RateLimitedError with
// InFlight set, MaxSleep later, no retry counted) without a seat or a slot
// kept for it, and waits again at the back of the queue; a task with no
// retries left waits for its seat however long, within half the time left
// before its deadline. A policy of seats alone takes no slot, so a pause
// (Pause, TooManyRequests) holds only the task that made it: it comes back
// after the pause. The seats are
// held by the Limiter's membership of the fleet: a server killed with
// handlers running gives their seats back when the fleet notices its
// silence (about two heartbeats).
//
// See the package examples.
package worker

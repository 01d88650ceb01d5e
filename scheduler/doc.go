// Package scheduler paces asynq tasks when they are enqueued: for producers
// that create many tasks at once, it gives each task a slot on its key with
// reserve.Limiter and enqueues it to run then, instead of enqueueing a peak
// that the workers would have to queue up.
//
// An Enqueuer reserves the slots of a whole batch in one Redis round trip
// (reserve.Limiter.Hold), records each slot for its task's ID, and enqueues
// each task with asynq.ProcessAt a little before its slot. The worker
// middleware (package worker) redeems that slot when the task runs, instead
// of reserving a second one, and sleeps the rest of the way to it, because
// asynq stores ProcessAt in whole seconds. The execution-time check still
// applies: a task that runs late (the workers were down or behind) by more
// than StaleAfter takes a fresh slot, so a backlog is paced again rather than
// run as a burst.
//
// This package has no type named Scheduler: asynq has one, for periodic
// tasks.
//
// See the package example.
package scheduler

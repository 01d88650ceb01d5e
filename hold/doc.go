// Package hold keeps slots for holders: a job queue's jobs, by ID. A slot
// kept for a holder is recorded in Redis beside its key's bucket, granted in
// the same atomic step, so that the holder redeems it later instead of
// reserving a second one.
//
// A job queue uses it two ways. A job that runs and finds its slot far away
// is rescheduled to it, and the slot is kept for it (Book.Claim): when the
// job runs again it redeems that slot instead of taking a fresh one, so the
// rescheduling costs no capacity and keeps the job's place. A batch of jobs
// enqueued at once can have their slots reserved and kept ahead of time,
// all in one round trip (Book.Hold), each job enqueued to run at its slot.
// A kept slot redeemed too late (StaleAfter) or covered by a pause made
// after it was granted is dropped for a fresh one, so that a backlog left by
// workers that were down drains at the rate, never as a burst.
//
// Packages worker (asynq's server side: Claim) and scheduler (asynq's
// enqueue side: Hold) share it. It is built on a reserve.Limiter, whose
// Redis path, fallback and metrics it uses.
package hold

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/hold"
	"github.com/pacer-go/pacer/internal/lead"
	"github.com/pacer-go/pacer/reserve"
)

// DefaultLead is how long before its slot a task is made due unless
// Options.Lead says otherwise: worker.DefaultLead, the one value both
// packages use.
const DefaultLead = lead.Default

// ErrInvalidOptions is returned, wrapped, for Options or enqueue options
// that cannot work.
var ErrInvalidOptions = errors.New("scheduler: invalid options")

// Options configure an Enqueuer. Set Pace; the other fields' zero values
// mean their defaults.
type Options struct {
	// Pace says whether task t is paced, and what one run of it costs: the
	// key, the key's policy and the cost. Give it the same function as
	// worker.Options.Pace, so that the worker redeems the slot on the same
	// key. Tasks for which it returns false are enqueued as they are.
	// Required.
	Pace func(t *asynq.Task) (reserve.Request, bool)

	// Lead is how long before its slot a task is made due (asynq.ProcessAt),
	// so that it reaches a worker a little early and sleeps the rest. Use
	// the worker's Options.Lead. It is also how soon after now the first
	// slot of a batch may be: a task due at once is picked up that late, and
	// would reach its slot stale. Default (0): DefaultLead, 500 ms.
	// Negative: no lead.
	Lead time.Duration
}

// An Enqueuer enqueues asynq tasks, each at its own slot on its key. It is
// safe for concurrent use.
type Enqueuer struct {
	client *asynq.Client
	holds  *hold.Book
	clock  reserve.Clock
	opts   Options
}

// NewEnqueuer returns an Enqueuer that reserves slots on l and enqueues with
// c.
func NewEnqueuer(c *asynq.Client, l *reserve.Limiter, opts Options) (*Enqueuer, error) {
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: nil asynq client", ErrInvalidOptions)
	case l == nil:
		return nil, fmt.Errorf("%w: nil Limiter", ErrInvalidOptions)
	case opts.Pace == nil:
		return nil, fmt.Errorf("%w: Pace is nil", ErrInvalidOptions)
	}
	opts.Lead = lead.Resolve(opts.Lead)
	holds, err := hold.New(l, hold.Options{NotBefore: opts.Lead})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return &Enqueuer{client: c, holds: holds, clock: l.Clock(), opts: opts}, nil
}

// Enqueue enqueues tasks with opts (asynq's enqueue options, applied to
// every task). Each paced task gets a slot on its key, in the order given,
// is recorded under a new task ID (asynq.TaskID, replacing any ID the task
// was created with; IDs sort in slot order) and is enqueued with asynq.ProcessAt Lead before its
// slot. The slot's time is on the Limiter's clock: local time, unless
// reserve.Options.Clock says otherwise. Tasks that are not paced are
// enqueued as they are, and so are fair ones (reserve.Request.Fair): a fair
// task's slot is booked only in its tenant's turn, when a worker runs it
// (see package worker), so that a tenant's large batch holds no slots ahead
// of the others' tasks.
//
// Reserving the slots of the whole batch costs one Redis round trip (see
// hold.Book.Hold); asynq then enqueues the tasks one by one, since it
// has no batch enqueue. No slot is earlier than Lead from now.
//
// It returns the TaskInfo of each task, in order. If some tasks could not be
// enqueued, their entries are nil and the error joins one error per task
// ("scheduler: task i: ..."); the slots reserved for them expire unused.
// While Redis is unavailable, reserving them waits for it as long as ctx
// allows (hold.Book.Hold); if they could not be reserved, nothing is
// enqueued. opts must not hold
// TaskID, ProcessAt or ProcessIn: Enqueue sets them.
func (e *Enqueuer) Enqueue(ctx context.Context, tasks []*asynq.Task, opts ...asynq.Option) ([]*asynq.TaskInfo, error) {
	for _, o := range opts {
		switch o.Type() {
		case asynq.TaskIDOpt, asynq.ProcessAtOpt, asynq.ProcessInOpt:
			return nil, fmt.Errorf("%w: Enqueue sets %v itself", ErrInvalidOptions, o)
		}
	}
	var (
		reqs  []hold.Request
		paced = make([]int, len(tasks)) // index into reqs, or -1
		batch = newBatchID()
	)
	for i, t := range tasks {
		if t == nil {
			return nil, fmt.Errorf("scheduler: task %d is nil", i)
		}
		p, ok := e.opts.Pace(t)
		if !ok || p.Fair() {
			// Not paced, or fair: booked only in its tenant's turn, when it
			// runs (by the worker's Middleware), never ahead.
			paced[i] = -1
			continue
		}
		paced[i] = len(reqs)
		reqs = append(reqs, hold.Request{ID: taskID(batch, len(reqs)), Request: p})
	}
	var grants []*hold.Grant
	if len(reqs) > 0 {
		var err error
		grants, err = e.holds.Hold(ctx, reqs)
		if err != nil {
			return nil, fmt.Errorf("scheduler: reserve slots: %w", err)
		}
	}
	infos := make([]*asynq.TaskInfo, len(tasks))
	var errs []error
	for i, t := range tasks {
		taskOpts := opts
		if j := paced[i]; j >= 0 {
			at := grants[j].Reservation.Time().Add(-e.opts.Lead)
			taskOpts = append(opts[:len(opts):len(opts)], asynq.TaskID(reqs[j].ID), asynq.ProcessAt(at))
		}
		info, err := e.client.EnqueueContext(ctx, t, taskOpts...)
		if err != nil {
			errs = append(errs, fmt.Errorf("scheduler: task %d: %w", i, err))
			continue
		}
		infos[i] = info
	}
	return infos, errors.Join(errs...)
}

// newBatchID names a batch: the time it was made (fixed-width hex, so that
// later batches sort after earlier ones) and a random part (so that
// producers never collide).
func newBatchID() string {
	return fmt.Sprintf("%016x-%s", time.Now().UnixNano(), uuid.NewString()[:8])
}

// taskID is the ID of the i-th paced task of a batch. IDs sort in the order
// of their slots: asynq moves the tasks due in one second to the queue in ID
// order, so when workers are scarce they are picked up in slot order and
// none waits behind a task with a later slot.
func taskID(batch string, i int) string {
	return fmt.Sprintf("%s-%08d", batch, i)
}

package reserve

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipeScripter is where a Limiter on one Redis server runs its scripts
// (Options.DisablePipelining): calls made while another is in flight share
// a round trip. A call made while none is in flight goes at once, on its
// caller's goroutine, as it would without it. Calls made while one is in
// flight queue, and go together, as one pipeline, when it returns; those
// made meanwhile go after that one, and so on. So at most one round trip
// of scripts is in flight per Limiter, and a call waits for the one in
// flight before its own (and, behind more than pipeMax queued calls, for
// theirs).
//
// It is coalescing (batch.go) across keys: coalescing merges one key's
// concurrent callers into one script call; this puts the script calls of
// many keys, each a round trip of its own, into one. Redis runs a
// pipeline's commands one after the other, as it would have run them from
// separate connections, and so does the client: the caller, its context
// and what it is told are each call's own (call, run). On a busy process
// with many keys at their limits it halves the client's CPU and Redis's
// per admission (docs/measurements.md); a caller alone pays a lock.
//
// Only EVALSHA goes this way. EVAL (script.Run's retry after NOSCRIPT),
// heartbeats and holds (l.rdb) go straight to the client.
type pipeScripter struct {
	*redis.Client

	mu      sync.Mutex
	busy    bool        // a call or pipeline is in flight
	pending []*pipeCall // the calls that queued meanwhile, in order
	sent    int64       // batches sent from the queue (tests)
}

// pipeMax is the most calls one pipeline carries; more go in the next. A
// batch of callers (MaxBatch) costs Redis up to a millisecond: 64 such
// calls hold its one thread up to 64 ms, under CallTimeout's 250 ms.
const pipeMax = 64

// A pipeCall is one EVALSHA waiting for, or in, a pipeline.
type pipeCall struct {
	ctx   context.Context
	sha   string
	keys  []string
	args  []any
	cmd   *redis.Cmd    // its outcome, set before done closes
	done  chan struct{} // closed when cmd is set
	taken bool          // in a pipeline (guarded by mu): its caller can no longer take it back
}

func newPipeScripter(c *redis.Client) *pipeScripter { return &pipeScripter{Client: c} }

// EvalSha runs the script now if nothing is in flight, else in the next
// pipeline. A caller whose context ends while its call queues takes it back
// (it was not sent); once its call is in a pipeline it returns at once, as
// a call cut short does: the call may have run.
func (p *pipeScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	p.mu.Lock()
	if !p.busy {
		p.busy = true
		p.mu.Unlock()
		cmd := p.Client.EvalSha(ctx, sha, keys, args...)
		p.next()
		return cmd
	}
	c := &pipeCall{ctx: ctx, sha: sha, keys: keys, args: args, done: make(chan struct{})}
	p.pending = append(p.pending, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
	}
	p.mu.Lock()
	select {
	case <-c.done:
		p.mu.Unlock()
		return c.cmd // (its pipeline returned meanwhile)
	default:
	}
	if !c.taken {
		for i, o := range p.pending {
			if o == c {
				p.pending = append(p.pending[:i], p.pending[i+1:]...)
				break
			}
		}
	}
	p.mu.Unlock()
	cmd := redis.NewCmd(ctx, append([]any{"evalsha", sha}, len(keys))...)
	cmd.SetErr(ctx.Err())
	return cmd
}

// next follows a call or pipeline that returned: it sends the calls that
// queued meanwhile, on a goroutine of their own, or marks nothing in
// flight.
func (p *pipeScripter) next() {
	p.mu.Lock()
	batch := p.take()
	p.mu.Unlock()
	if batch != nil {
		go p.flush(batch)
	}
}

// take returns the next pipeline's calls, marked taken, or nil (and nothing
// is in flight any more) if none queue. p.mu is held.
func (p *pipeScripter) take() []*pipeCall {
	if len(p.pending) == 0 {
		p.busy = false
		return nil
	}
	n := min(len(p.pending), pipeMax)
	batch := make([]*pipeCall, n)
	copy(batch, p.pending)
	for _, c := range batch {
		c.taken = true
	}
	rest := copy(p.pending, p.pending[n:])
	clear(p.pending[rest:])
	p.pending = p.pending[:rest]
	p.sent++
	return batch
}

// flush sends batch as one pipeline, then each pipeline that queued
// meanwhile, until none did. A call alone goes as itself, on its caller's
// context.
func (p *pipeScripter) flush(batch []*pipeCall) {
	for batch != nil {
		if len(batch) == 1 {
			c := batch[0]
			c.cmd = p.Client.EvalSha(c.ctx, c.sha, c.keys, c.args...)
		} else {
			ctx := pipeContext(batch)
			pipe := p.Client.Pipeline()
			for _, c := range batch {
				c.cmd = pipe.EvalSha(ctx, c.sha, c.keys, c.args...)
			}
			_, _ = pipe.Exec(ctx) // each call's error is its own cmd's
		}
		for _, c := range batch {
			close(c.done)
		}
		p.mu.Lock()
		batch = p.take()
		p.mu.Unlock()
	}
}

// pipeCtx is a pipeline's context: no caller's (one who leaves does not
// cut the others' calls short), but with the latest of their deadlines,
// which go-redis gives the socket (no timer: one armed per pipeline cost
// more than the round trips saved when pipelines are short), and the
// first one's values.
type pipeCtx struct {
	context.Context // WithoutCancel of the first call's
	deadline        time.Time
}

func (c pipeCtx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

// pipeContext returns batch's pipeCtx: without a deadline if a call has
// none.
func pipeContext(batch []*pipeCall) context.Context {
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	return pipeCtx{Context: context.WithoutCancel(batch[0].ctx), deadline: latest}
}

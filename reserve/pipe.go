package reserve

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipeScripter is where a Limiter runs its scripts
// (Options.DisablePipelining): calls made while another is in flight to
// the same Redis server share a round trip. A call made while none is in
// flight there goes at once, on its caller's goroutine, as it would
// without it. Calls made while one is in flight queue, and go together, as
// one pipeline, when it returns; those made meanwhile go after that one,
// and so on. So at most one round trip of scripts is in flight per Limiter
// and server, and a call waits for the one in flight before its own (and,
// behind more than pipeMax queued calls, for theirs).
//
// Each server has a lane of its own: one for a single server (or the
// master a failover client follows), one per master on a Cluster, chosen
// by the slot of the call's key as the Cluster client's map of slots has
// it. So a master that hangs holds only its own slots' calls.
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
	// The client: what does not queue (EVAL, SCRIPT LOAD, a call alone)
	// goes straight to it. On a Cluster it follows MOVED and ASK.
	redis.Scripter

	// route returns the server a call on key goes to, as a client of that
	// server alone, and its address (the lane's name); ok is false when it
	// is not known (a Cluster client that has no map of slots yet): then
	// the call goes straight to the client.
	route func(ctx context.Context, key string) (node *redis.Client, addr string, ok bool)
	// cluster: a call a pipeline's server refused with MOVED, ASK or
	// TRYAGAIN (its slot moved, or is moving: it did not run) is sent again
	// through the Cluster client, which follows the redirection.
	cluster bool

	mu     sync.Mutex
	lanes  map[string]*pipeLane // by address; each server's lane, kept
	held   bool                 // every call queues until release (tests: HoldPipe)
	sent   int64                // batches sent from the queues (tests)
	closed bool                 // close ran: no flusher starts, none is handed work

	quit chan struct{} // closed by close: the lanes' flushers return
}

// A pipeLane is one server's calls: the one in flight, and those queued
// behind it.
type pipeLane struct {
	node    *redis.Client // the server's own client, as the latest call routed
	busy    bool          // a call or pipeline is in flight
	pending []*pipeCall   // the calls that queued meanwhile, in order
	// work hands the lane's flusher a pipeline to send; nil until the
	// lane's first. It holds one at most: the lane has one pipeline in
	// flight at most, and its flusher takes each before the lane can
	// hand it another.
	work chan pipeJob
}

// A pipeJob is a pipeline handed to a lane's flusher: its calls, and the
// client of their server.
type pipeJob struct {
	node  *redis.Client
	batch []*pipeCall
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
	done  chan struct{} // closed when cmd is set, or when alone is
	taken bool          // in a pipeline, or handed to its caller to send alone (guarded by mu): no longer in the queue
	alone bool          // it queued alone: its caller sends it, on its own goroutine, then passes the lane on (set before done closes)
}

// newPipeScripter returns the pipeScripter of c, a single server's client
// or a Cluster's, or nil if c is of a kind it does not serve (a Ring).
func newPipeScripter(c redis.UniversalClient) *pipeScripter {
	p := &pipeScripter{Scripter: c, lanes: map[string]*pipeLane{}, quit: make(chan struct{})}
	switch c := c.(type) {
	case *redis.Client:
		p.route = func(context.Context, string) (*redis.Client, string, bool) { return c, "", true }
	case *redis.ClusterClient:
		p.cluster = true
		p.route = func(ctx context.Context, key string) (*redis.Client, string, bool) {
			node, err := c.MasterForKey(ctx, key)
			if err != nil {
				return nil, "", false
			}
			return node, node.Options().Addr, true
		}
	default:
		return nil
	}
	return p
}

// EvalSha runs the script now if nothing is in flight to its key's server,
// else in that server's next pipeline. A caller whose context ends while
// its call queues takes it back (it was not sent); once its call is in a
// pipeline it returns at once, as a call cut short does: the call may have
// run.
func (p *pipeScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if len(keys) == 0 {
		return p.Scripter.EvalSha(ctx, sha, keys, args...)
	}
	node, addr, ok := p.route(ctx, keys[0])
	if !ok {
		return p.Scripter.EvalSha(ctx, sha, keys, args...)
	}
	p.mu.Lock()
	ln := p.lanes[addr]
	if ln == nil {
		ln = &pipeLane{}
		p.lanes[addr] = ln
	}
	ln.node = node
	if !ln.busy && !p.held {
		ln.busy = true
		p.mu.Unlock()
		return p.sendNow(ctx, ln, sha, keys, args)
	}
	c := &pipeCall{ctx: ctx, sha: sha, keys: keys, args: args, done: make(chan struct{})}
	ln.pending = append(ln.pending, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		if c.alone {
			return p.sendNow(ctx, ln, sha, keys, args)
		}
		return c.cmd
	case <-ctx.Done():
	}
	p.mu.Lock()
	if c.alone {
		// Its turn came meanwhile (its done closes, or has): it is not
		// sent, and the lane goes on.
		p.mu.Unlock()
		p.next(ln)
	} else {
		select {
		case <-c.done:
			p.mu.Unlock()
			return c.cmd // (its pipeline returned meanwhile)
		default:
		}
		if !c.taken {
			for i, o := range ln.pending {
				if o == c {
					ln.pending = append(ln.pending[:i], ln.pending[i+1:]...)
					break
				}
			}
		}
		p.mu.Unlock()
	}
	cmd := redis.NewCmd(ctx, append([]any{"evalsha", sha}, len(keys))...)
	cmd.SetErr(ctx.Err())
	return cmd
}

// sendNow sends a call on its caller's goroutine, the one in flight in
// ln, then passes ln on.
func (p *pipeScripter) sendNow(ctx context.Context, ln *pipeLane, sha string, keys []string, args []any) *redis.Cmd {
	cmd := p.Scripter.EvalSha(ctx, sha, keys, args...)
	p.next(ln)
	return cmd
}

// next follows a call or pipeline to ln's server that returned: it sends
// the calls that queued meanwhile (on a goroutine of their own; one that
// queued alone, its caller sends), or marks nothing in flight there.
func (p *pipeScripter) next(ln *pipeLane) {
	p.mu.Lock()
	batch, node := p.take(ln)
	p.mu.Unlock()
	p.send(ln, node, batch)
}

// send sends batch, taken from ln: a call alone is handed back to its
// caller, which is waiting for it (no goroutine, and one wake-up where a
// goroutine of its own would cost two); more go as one pipeline, sent by
// the lane's flusher (flush).
func (p *pipeScripter) send(ln *pipeLane, node *redis.Client, batch []*pipeCall) {
	switch len(batch) {
	case 0:
	case 1:
		close(batch[0].done) // (alone, set by take)
	default:
		p.mu.Lock()
		handed := !p.closed && p.handTo(ln, pipeJob{node, batch})
		p.mu.Unlock()
		if !handed {
			// A pipeline that queued before close: a goroutine of its
			// own sends it, as every pipeline went before lanes had
			// flushers.
			go p.flush(ln, node, batch)
		}
	}
}

// handTo hands j to ln's flusher, started with the lane's first pipeline,
// and reports whether it took it. p.mu is held.
//
// A flusher is a goroutine that stays: a goroutine started per pipeline
// paid for its start and for growing its stack through the client's
// calls, 8% of a process's CPU on the cold phase's shape with no call
// waiting.
func (p *pipeScripter) handTo(ln *pipeLane, j pipeJob) bool {
	if ln.work == nil {
		ln.work = make(chan pipeJob, 1)
		go p.flusher(ln)
	}
	select {
	case ln.work <- j:
		return true
	default:
		return false // (not expected: the lane has one in flight at most)
	}
}

// flusher sends ln's pipelines (flush) until close; one handed to it
// before then is sent first.
func (p *pipeScripter) flusher(ln *pipeLane) {
	for {
		select {
		case j := <-ln.work:
			p.flush(ln, j.node, j.batch)
		case <-p.quit:
			select {
			case j := <-ln.work:
				p.flush(ln, j.node, j.batch)
			default:
			}
			return
		}
	}
}

// close stops the lanes' flushers: each returns once it has sent what it
// was handed (Close does not wait for a pipeline in flight, as it does not
// for a call). A pipeline that forms later goes on a goroutine of its own
// (send).
func (p *pipeScripter) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.quit)
	}
}

// release ends a hold (HoldPipe): each lane with calls queued and none in
// flight sends them.
func (p *pipeScripter) release() {
	p.mu.Lock()
	p.held = false
	type sending struct {
		ln    *pipeLane
		node  *redis.Client
		batch []*pipeCall
	}
	var out []sending
	for _, ln := range p.lanes {
		if ln.busy {
			continue
		}
		if batch, node := p.take(ln); batch != nil {
			ln.busy = true
			out = append(out, sending{ln, node, batch})
		}
	}
	p.mu.Unlock()
	for _, s := range out {
		p.send(s.ln, s.node, s.batch)
	}
}

// take returns ln's next pipeline's calls, marked taken (and alone, if it
// is one call), and the client of its server; or nil (and nothing is in
// flight there any more) if none queue, or while held. p.mu is held.
func (p *pipeScripter) take(ln *pipeLane) ([]*pipeCall, *redis.Client) {
	if len(ln.pending) == 0 || p.held {
		ln.busy = false
		return nil, nil
	}
	n := min(len(ln.pending), pipeMax)
	batch := make([]*pipeCall, n)
	copy(batch, ln.pending)
	for _, c := range batch {
		c.taken = true
	}
	batch[0].alone = n == 1
	rest := copy(ln.pending, ln.pending[n:])
	clear(ln.pending[rest:])
	ln.pending = ln.pending[:rest]
	p.sent++
	return batch, ln.node
}

// flush sends batch (two calls or more) to node as one pipeline, then each
// pipeline that queued in ln meanwhile, until none did, or one call alone
// did (its caller sends it: send).
func (p *pipeScripter) flush(ln *pipeLane, node *redis.Client, batch []*pipeCall) {
	for len(batch) > 1 {
		ctx := pipeContext(batch)
		pipe := node.Pipeline()
		for _, c := range batch {
			c.cmd = pipe.EvalSha(ctx, c.sha, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx) // each call's error is its own cmd's
		if p.cluster {
			for _, c := range batch {
				if redirected(c.cmd.Err()) {
					c.cmd = p.Scripter.EvalSha(c.ctx, c.sha, c.keys, c.args...)
				}
			}
		}
		for _, c := range batch {
			close(c.done)
		}
		p.mu.Lock()
		batch, node = p.take(ln)
		p.mu.Unlock()
	}
	p.send(ln, node, batch)
}

// redirected reports a Cluster master's refusal of a call that did not
// run there: MOVED or ASK (its slot is, or is moving, elsewhere), or
// TRYAGAIN (its keys are split by a slot's migration).
func redirected(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	return redis.IsTryAgainError(err)
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

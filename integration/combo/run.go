package combo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// Config says how to run one seed.
type Config struct {
	Seed uint64
	// Args are the arguments the fleet processes and the provider (this
	// binary, re-run) get: "-test.run=^$" for a test binary.
	Args []string
	// Log, if set, gets the timeline as it plays.
	Log io.Writer
	// Cluster runs the seed on a Redis Cluster (cluster.go), as
	// Scenario.ForCluster plays it.
	Cluster bool
}

// Result is one seed's run and its verdict.
type Result struct {
	Scenario Scenario
	Prefix   string
	Start    time.Time // the fleet's start: At 0 of the scenario
	End      time.Time
	Actions  []Action
	Calls    []Call            // as the provider recorded them, in arrival order
	Notes    []Note            // every fleet process's notes
	Exits    map[string]string // fleet processes that failed, but for those the runner killed
	// Lives: every fleet process, from its start to its end (killed,
	// closed, or the run's end).
	Lives []Life
	// Placement: in a run on a Cluster, the master (as Event.Node) that
	// holds the fleet's records ("{limiters}") and each key.
	Placement map[string]int `json:",omitempty"`
	// Stored: the stored limit of each key the operator changes, as Status
	// read it after each time Redis came back empty and once the run was
	// over (stored.go judges it).
	Stored   []StoredRead
	Duration time.Duration // of the whole run, set-up and verdict included
	// PythonSkipped says why the seed's Python draw did not run (no
	// interpreter with redis-py and lupa, outside CI): Go processes ran in
	// its slots.
	PythonSkipped string `json:",omitempty"`
	// Seats: KeySeats's tickets' hash as the runner read it through the run,
	// each change (seatwatch.go); SeatsEnd, read once every fleet process
	// had exited.
	Seats    []SeatSnap `json:",omitempty"`
	SeatsEnd *SeatSnap  `json:",omitempty"`
	Verdict  Verdict
}

// Life is one fleet process's life: From when it was told to start (Unix
// ns), To when the runner killed it or told it to close, or the run's end.
type Life struct {
	ID       string
	Slot     int
	Python   bool `json:",omitempty"` // a Python child (python.go)
	From, To int64
}

// Run runs seed's scenario: a throwaway redis-server, the provider, the
// fleet, the timeline, and the verdict. Everything it started is stopped
// when it returns, also on error. An error means the run could not be
// made (a process would not start), not that the seed failed: see
// Result.Verdict for that.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	began := time.Now()
	sc := Generate(cfg.Seed)
	if cfg.Cluster {
		sc = sc.ForCluster(clusterMasters)
	}
	res := &Result{Scenario: sc, Prefix: randomPrefix(), Exits: map[string]string{}}
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	script, skipped, err := pythonDraw(sc)
	if err != nil {
		return nil, err
	}
	if skipped != "" {
		res.PythonSkipped = skipped
		logf("seed %d: %s", sc.Seed, skipped)
	}

	var (
		at      redisAt
		srv     *redisproc.Server
		cluster *redisproc.Cluster
		masters []string // on a Cluster, master 1 first (Event.Node)
		anchors []int    // and the lowest slot each served at the start
	)
	if cfg.Cluster {
		if cluster, err = redisproc.StartCluster(redisproc.ClusterSpec{Masters: sc.Masters, Replicas: sc.Replicas}); err != nil {
			return nil, err
		}
		defer cluster.Close()
		at = redisAt{addrs: cluster.Masters, cluster: true}
		if masters, anchors, err = mastersBySlot(cluster); err != nil {
			return nil, err
		}
		if res.Placement, err = placement(cluster, masters, res.Prefix); err != nil {
			return nil, err
		}
	} else {
		if srv, err = redisproc.Start(redisproc.Spec{}); err != nil {
			return nil, err
		}
		defer srv.Close()
		at = redisAt{addrs: []string{srv.Addr()}}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // kills every process still running
	prov, url, err := startProvider(ctx, providerSpec{Dialect: sc.dialectOf(), Body: sc.Body, Seats: sc.Seats}, cfg.Args)
	if err != nil {
		return nil, err
	}
	defer prov.kill()

	if sc.FleetFormat != "" {
		c := at.client(redis.UniversalOptions{})
		err := c.Set(ctx, layout.FormatKey(res.Prefix), sc.FleetFormat, 0).Err()
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("the fleet's format: %w", err)
		}
	}
	r := &runner{cfg: cfg, sc: sc, res: res, logf: logf, ctx: ctx, at: at, url: url, script: script, starting: map[int]chan struct{}{}}
	var proxies []*slowProxy
	if sc.slowRedis() {
		// Each slot's processes reach Redis through a proxy that can slow
		// them down (slow.go); the runner, the operator and the injector
		// directly.
		for range sc.Procs {
			p, err := startSlowProxy(ctx, at.addrs[0])
			if err != nil {
				return nil, err
			}
			defer p.close()
			proxies = append(proxies, p)
			r.slotAddrs = append(r.slotAddrs, p.addr())
		}
	}
	defer r.killAll()
	defer func() {
		for _, h := range r.preHogs {
			h.kill() // if the run stopped before their end
		}
	}()
	for i := range sc.Procs {
		if _, err := r.startChild(i); err != nil {
			return nil, err
		}
	}
	// CPU hogs drawn from the fleet's start spin before it begins: its
	// processes' first calls (dialling Redis, loading the scripts) are
	// made on a loaded machine.
	for _, e := range sc.Events {
		if e.Kind == FaultHog && e.At == 0 {
			r.preHogAt = time.Now().UnixNano()
			if r.preHogs, err = startHogs(ctx, e.Hogs*runtime.NumCPU(), cfg.Args); err != nil {
				return nil, err
			}
		}
	}
	res.Start = time.Now().Add(300 * time.Millisecond)
	res.End = res.Start.Add(sc.Length)
	for _, p := range r.live() {
		if err := p.begin(res.Start, res.End); err != nil {
			return nil, fmt.Errorf("child %s: %w", p.id, err)
		}
	}
	in := newInjector(srv, cluster, anchors, proxies)
	defer in.close()
	op, err := newOperator(at, res.Prefix, url, cfg.Seed)
	if err != nil {
		return nil, err
	}
	defer op.close()

	watchCtx, stopWatch := context.WithDeadline(ctx, res.End.Add(time.Second))
	watched := make(chan []SeatSnap, 1)
	go func() { watched <- watchSeats(watchCtx, at, res.Prefix) }()
	r.play(in, op)
	if err := ctx.Err(); err != nil {
		stopWatch()
		<-watched
		return nil, err // interrupted: the deferred calls stop everything
	}
	r.mu.Lock()
	res.Stored = append(r.stored, op.readStored(changedKeys(sc))...)
	r.mu.Unlock()
	r.waitChildren(res.End.Add(20 * time.Second))
	stopWatch()
	res.Seats = <-watched
	{
		rdb := newSeatClient(at)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		end := readSeats(rctx, rdb, res.Prefix)
		cancel()
		rdb.Close()
		res.SeatsEnd = &end
	}
	calls, err := records(url)
	if err != nil {
		return nil, err
	}
	res.Calls = calls
	prov.kill()
	r.collect()
	r.lives()
	res.Verdict = Judge(res)
	res.Duration = time.Since(began)
	return res, nil
}

// runner is the state of one Run.
type runner struct {
	cfg  Config
	sc   Scenario
	res  *Result
	logf func(string, ...any)
	ctx  context.Context
	at   redisAt
	// slotAddrs: each fleet slot's way to Redis (a proxy's) in a seed that
	// draws a slow Redis; else none, and at.
	slotAddrs []string
	url       string
	script    string // the Python child's, if the seed's Python draw runs

	// preHogs: the CPU hogs of a FaultHog at 0, started at preHogAt,
	// before the fleet's start.
	preHogs  []*proc
	preHogAt int64

	mu     sync.Mutex
	slots  []*proc // the fleet's process in each slot now
	all    []*proc // every fleet process started
	acts   []Action
	stored []StoredRead // read after Redis came back empty
	// healed: when the latest restart empty's heal returned. It may return
	// seconds after the scenario planned (a Cluster's node rejoining), so
	// a process started again after it keeps restartGap from this time,
	// not only from the planned end (clearOfRestart).
	healed time.Time
	// starting: the slots whose process is being started again, closed
	// once it has been (or was not): the slot's next fault waits for it.
	starting map[int]chan struct{}
}

// prolongsRestart reports whether e, a Redis fault that began at, kept
// the fleet's records from answering (a freeze, a CLIENT PAUSE, or out
// of memory, of their master) while the latest restart empty's gap ran:
// the members still pacing locally could not come back meanwhile (their
// probes' heartbeats fail on it too), so a process started at its end
// starts just after the restart as far as the fleet can tell. The gap
// then runs from e's heal. (The Cluster's seed 50: the fleet's master,
// restarted empty, was paused twice right after, 6.2 s in all; a process
// started 9 ms after the second pause took the whole of a key on Redis
// beside a member still pacing locally, listed only at its next probe,
// 1 s later.) r.mu is held.
func (r *runner) prolongsRestart(e Event, at time.Time) bool {
	switch e.Kind {
	case FaultFreeze, FaultCPause, FaultOOM:
	default:
		return false
	}
	if e.Node != 0 && e.Node != r.res.Placement[fleetRecords] {
		return false
	}
	return !r.healed.IsZero() && at.Before(r.healed.Add(restartGap))
}

// clearOfRestart waits until restartGap has passed since the latest
// restart empty's heal returned. It reports false if that is after the
// run's end less restartBefore (the process is then not started), or the
// run was cut.
func (r *runner) clearOfRestart() bool {
	for {
		r.mu.Lock()
		at := r.healed.Add(restartGap)
		r.mu.Unlock()
		if !time.Now().Before(at) {
			return true
		}
		if at.After(r.res.End.Add(-restartBefore)) {
			return false
		}
		if !sleepUntil(r.ctx, at) {
			return false
		}
		// Again: a fault of the fleet's records may have moved the gap
		// meanwhile (prolongsRestart).
	}
}

// started waits until slot's process, if it is being started again, has
// been.
func (r *runner) started(slot int) {
	r.mu.Lock()
	ch := r.starting[slot]
	r.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// startChild starts a fleet process in slot: its ID is the slot's number,
// and for the processes started again in it, a letter ("1b", "1c").
func (r *runner) startChild(slot int) (*proc, error) {
	r.mu.Lock()
	gen := 0
	for _, p := range r.all {
		if p.slot == slot {
			gen++
		}
	}
	r.mu.Unlock()
	id := strconv.Itoa(slot + 1)
	if gen > 0 {
		id += string(rune('a' + gen))
	}
	spec := ChildSpec{ID: id, Seed: r.cfg.Seed, Prefix: r.res.Prefix, Provider: r.url, Body: r.sc.Body, Seats: r.sc.Seats}
	switch {
	case r.at.cluster:
		spec.Cluster = r.at.addrs
	case r.slotAddrs != nil:
		spec.Redis = r.slotAddrs[slot]
	default:
		spec.Redis = r.at.addrs[0]
	}
	python := r.script != "" && r.sc.isPython(slot)
	if python {
		spec.Script = r.script
	} else {
		spec.SeatCallers = r.seatCallers()
	}
	p, err := startChild(r.ctx, spec, r.cfg.Args)
	if err != nil {
		return nil, err
	}
	p.slot, p.python = slot, python
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.slots) <= slot {
		r.slots = append(r.slots, nil)
	}
	r.slots[slot] = p
	r.all = append(r.all, p)
	return p, nil
}

// seatCallers is how many goroutines each Go process runs on KeySeats: at
// least seatGoroutines, and together at least seatDemand times N, so that
// the band binds also when the seed's Python processes (which do not call
// it) take most slots.
func (r *runner) seatCallers() int {
	goSlots := 0
	for s := range r.sc.Procs {
		if r.script == "" || !r.sc.isPython(s) {
			goSlots++
		}
	}
	return max(seatGoroutines, (seatDemand*r.sc.Seats.N+goSlots-1)/max(goSlots, 1))
}

func (r *runner) live() []*proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.slots)
}

func (r *runner) record(a Action) {
	r.mu.Lock()
	r.acts = append(r.acts, a)
	r.mu.Unlock()
	r.logf("  %s", r.describe(a))
}

// step is one thing the timeline does at At.
type step struct {
	at time.Duration
	do func()
}

// play plays the scenario's timeline until the run's end.
func (r *runner) play(in *injector, op *operator) {
	var steps []step
	var wg sync.WaitGroup
	for _, e := range r.sc.Events {
		switch {
		case e.Kind.IsRedisFault():
			if keys := changedKeys(r.sc); e.Kind == FaultRestart && len(keys) > 0 && e.At+e.For+storedAfter < r.sc.Length {
				steps = append(steps, step{e.At + e.For + storedAfter, func() {
					wg.Go(func() {
						reads := op.readStored(keys)
						r.mu.Lock()
						r.stored = append(r.stored, reads...)
						r.mu.Unlock()
					})
				}})
			}
			var a *Action
			steps = append(steps, step{e.At, func() {
				a = &Action{Kind: e.Kind, For: e.For, Node: e.Node, At: time.Now().UnixNano()}
				r.mu.Lock()
				if r.prolongsRestart(e, time.Unix(0, a.At)) {
					// A process started during it reaches the fleet's
					// records only at its end: none starts until then
					// (clearOfRestart), its heal sets the time it ended.
					r.healed = time.Unix(0, a.At).Add(e.For)
				}
				r.mu.Unlock()
				if err := in.inject(e); err != nil {
					a.Err = err.Error()
				}
				if e.Kind == FaultRestart {
					a.Stopped = time.Now().UnixNano()
				}
			}}, step{e.At + e.For, func() {
				if err := in.heal(e); err != nil {
					a.Err = strings.TrimSpace(a.Err + " heal: " + err.Error())
				}
				a.End = time.Now().UnixNano()
				r.mu.Lock()
				if e.Kind == FaultRestart || r.prolongsRestart(e, time.Unix(0, a.At)) {
					r.healed = time.Now()
				}
				r.mu.Unlock()
				r.record(*a)
			}})
		case e.Kind == FaultKill || e.Kind == FaultClose:
			var a *Action
			steps = append(steps, step{e.At, func() {
				r.started(e.Child)
				p := r.live()[e.Child]
				a = &Action{Kind: e.Kind, For: e.For, Child: p.id, At: time.Now().UnixNano()}
				p.to = a.At
				if e.Kind == FaultClose {
					// It closes and exits by itself (a failed exit is
					// a violation, as for any process).
					if err := p.command("close"); err != nil {
						a.Err = err.Error()
					}
					return
				}
				p.killed = true
				p.kill()
			}}, step{e.At + e.For, func() {
				done := make(chan struct{})
				r.mu.Lock()
				r.starting[e.Child] = done
				r.mu.Unlock()
				wg.Go(func() {
					defer close(done)
					if !r.clearOfRestart() {
						r.logf("  slot %d not started again: a restart empty healed too late", e.Child+1)
						a.End = time.Now().UnixNano()
						r.record(*a)
						return
					}
					p, err := r.startChild(e.Child)
					if err == nil {
						err = p.begin(time.Now(), r.res.End)
					}
					if err != nil {
						a.Err = err.Error()
					} else {
						a.Started = p.id
					}
					a.End = time.Now().UnixNano()
					r.record(*a)
				})
			}})
		case e.Kind == FaultStall:
			var a *Action
			steps = append(steps, step{e.At, func() {
				r.started(e.Child)
				p := r.live()[e.Child]
				a = &Action{Kind: e.Kind, For: e.For, Child: p.id, At: time.Now().UnixNano()}
				if err := p.signal(syscall.SIGSTOP); err != nil {
					a.Err = err.Error()
				}
			}}, step{e.At + e.For, func() {
				if err := r.procOf(a.Child).signal(syscall.SIGCONT); err != nil {
					a.Err = strings.TrimSpace(a.Err + " continue: " + err.Error())
				}
				a.End = time.Now().UnixNano()
				r.record(*a)
			}})
		case e.Kind == FaultHog:
			// Started on a goroutine of their own (a few execs), so that
			// the timeline's next steps are not held up.
			var (
				a       *Action
				hogs    []*proc
				started = make(chan struct{})
			)
			steps = append(steps, step{e.At, func() {
				a = &Action{Kind: e.Kind, For: e.For, At: time.Now().UnixNano()}
				if e.At == 0 && r.preHogs != nil {
					a.At, hogs = r.preHogAt, r.preHogs
					close(started)
					return
				}
				wg.Go(func() {
					defer close(started)
					var err error
					if hogs, err = startHogs(r.ctx, e.Hogs*runtime.NumCPU(), r.cfg.Args); err != nil {
						a.Err = err.Error()
					}
				})
			}}, step{e.At + e.For, func() {
				<-started
				for _, h := range hogs {
					h.kill()
				}
				a.End = time.Now().UnixNano()
				r.record(*a)
			}})
		case e.Kind == FaultReshard || e.Kind == FaultFailover:
			steps = append(steps, step{e.At, func() {
				wg.Go(func() {
					a := Action{Kind: e.Kind, Node: e.Node, At: time.Now().UnixNano()}
					var err error
					if e.Kind == FaultReshard {
						a.Moved, err = in.reshard(e, r.res.Prefix)
					} else {
						a.Moved, err = in.failover(e)
					}
					if err != nil {
						a.Err = err.Error()
					}
					a.End = time.Now().UnixNano()
					r.record(a)
				})
			}})
		case e.Kind == LocalPause:
			steps = append(steps, step{e.At, func() {
				r.started(e.Child)
				p := r.live()[e.Child]
				if p.to != 0 { // not started again (clearOfRestart)
					r.logf("  slot %d: no process to pause %s", e.Child+1, e.Key)
					return
				}
				a := Action{Kind: e.Kind, Key: e.Key, For: e.For, Child: p.id, At: time.Now().UnixNano()}
				if err := p.command(fmt.Sprintf("pause %s %d", e.Key, e.For.Nanoseconds())); err != nil {
					a.Err = err.Error()
				}
				a.End = time.Now().UnixNano()
				r.record(a)
			}})
		default:
			steps = append(steps, step{e.At, func() { wg.Go(func() { r.record(op.do(e)) }) }})
		}
	}
	slices.SortStableFunc(steps, func(a, b step) int { return int(a.at - b.at) })
	for _, s := range steps {
		if !sleepUntil(r.ctx, r.res.Start.Add(s.at)) {
			break
		}
		s.do()
	}
	sleepUntil(r.ctx, r.res.End)
	wg.Wait()
	r.mu.Lock()
	r.res.Actions = slices.Clone(r.acts)
	r.mu.Unlock()
	slices.SortStableFunc(r.res.Actions, func(a, b Action) int { return int(a.At - b.At) })
}

// procOf returns the fleet process id.
func (r *runner) procOf(id string) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.all {
		if p.id == id {
			return p
		}
	}
	return nil
}

// lives records every fleet process's life in the result.
func (r *runner) lives() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.all {
		to := p.to
		if to == 0 {
			to = r.res.End.UnixNano()
		}
		r.res.Lives = append(r.res.Lives, Life{ID: p.id, Slot: p.slot, Python: p.python, From: p.from, To: to})
	}
}

// waitChildren waits until every fleet process has exited, and kills those
// still running at deadline.
func (r *runner) waitChildren(deadline time.Time) {
	r.mu.Lock()
	all := slices.Clone(r.all)
	r.mu.Unlock()
	for _, p := range all {
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			r.res.Exits[p.id] = "still running 20 s after the end: killed"
			p.killed = true
			p.kill()
		}
	}
}

// killAll kills every fleet process still running.
func (r *runner) killAll() {
	r.mu.Lock()
	all := slices.Clone(r.all)
	r.mu.Unlock()
	for _, p := range all {
		p.kill()
	}
}

// collect reads every fleet process's notes and exit status.
func (r *runner) collect() {
	r.mu.Lock()
	all := slices.Clone(r.all)
	r.mu.Unlock()
	for _, p := range all {
		c := p.child()
		err := c.Wait()
		for _, line := range c.Lines() {
			var n Note
			if json.Unmarshal([]byte(line), &n) == nil && n.Type != "" {
				r.res.Notes = append(r.res.Notes, n)
			}
		}
		if err != nil && !p.killed {
			msg := tail(c.Stderr(), 20)
			if i := strings.Index(c.Stderr(), "WARNING: DATA RACE"); i >= 0 {
				// The race detector's report (a -race build): its
				// first goroutines, which the tail leaves out.
				msg = head(c.Stderr()[i:], 60) + "\n...\n" + msg
			}
			r.res.Exits[p.id] = fmt.Sprintf("%v\n%s", err, msg)
		}
	}
}

// records fetches the provider's records.
func records(url string) ([]Call, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url + "/records")
	if err != nil {
		return nil, fmt.Errorf("provider records: %w", err)
	}
	defer resp.Body.Close()
	var calls []Call
	if err := json.NewDecoder(resp.Body).Decode(&calls); err != nil {
		return nil, fmt.Errorf("provider records: %w", err)
	}
	return calls, nil
}

func randomPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "combo:" + hex.EncodeToString(b[:]) + ":"
}

// sleepUntil sleeps until t, or until ctx ends (false).
func sleepUntil(ctx context.Context, t time.Time) bool {
	sleepCtx(ctx, time.Until(t))
	return ctx.Err() == nil
}

// head returns the first n lines of s.
func head(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

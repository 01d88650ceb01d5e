package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fleetproc "github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// clusterChildEnv carries a cluster child's job (see package internal/fleet).
const clusterChildEnv = "PACERBENCH_CLUSTER_CHILD"

// clusterProfileEnv, when set to a directory, has each cluster child write
// a CPU profile of its run there (cluster-<procs>-<index>.pprof) and a heap
// profile at its end (.heap), for go tool pprof.
const clusterProfileEnv = "PACERBENCH_CLUSTER_PROFILE"

// clusterJob is what each process of the cluster phase is told; the keys
// it calls follow from its index (fleetproc.Index) and the round.
type clusterJob struct {
	Seeds []string // every node of the Cluster
	Procs int
	// The cold keys: hostName(0) ... hostName(Keys-1), called ColdRate
	// times a second by the whole fleet, each key once a round of
	// Keys/ColdRate seconds, at ColdLimit (twice that: no call waits).
	Keys      int
	ColdRate  float64
	ColdLimit limit
	// The judged keys: each called by Waiters goroutines of every process
	// in a loop of Wait, so at its limit, JudgedLimit.
	Judged      []string
	JudgedLimit limit
	Waiters     int
	// JudgedAfter is when, after the start, the judged keys' waiters
	// begin: once the fleet has settled.
	JudgedAfter time.Duration
	// StartGap is the time between two processes' starts (New).
	StartGap time.Duration
}

// clusterNewTries is how many times a process calls New, a second apart,
// before it gives up.
const clusterNewTries = 30

// round is the cold keys' period: each key is called once a round.
func (j clusterJob) round() time.Duration {
	return time.Duration(float64(j.Keys) / j.ColdRate * float64(time.Second))
}

// coldCall is when and which cold key process i calls m-th in round r:
// in round r the process calls the keys k = m*Procs + (i+r) mod Procs, m =
// 0, 1, ..., evenly over the round, the processes interleaved. So each key
// is called once a round, by another process each round (the fleet shares
// its hosts), about a round after its previous call. ok is false past the
// round's last key.
func (j clusterJob) coldCall(i, r, m int) (k int, at time.Duration, ok bool) {
	k = m*j.Procs + (i+r)%j.Procs
	if k >= j.Keys {
		return 0, 0, false
	}
	perRound := (j.Keys + j.Procs - 1) / j.Procs // the most keys a process calls in a round
	step := j.round().Seconds() / float64(perRound)
	s := float64(r)*j.round().Seconds() + float64(m)*step + float64(i)*step/float64(j.Procs)
	return k, time.Duration(s * float64(time.Second)), true
}

// The lines a cluster child prints on stdout, each in one write (seamsOut),
// times in Unix ns:
//
//	ready              the Limiter is made and warmed up
//	n <ns> <k> <text>  New failed k times before it worked (the first error)
//	c <ns> <k>         a Wait on cold key k returned nil
//	j <ns> <i> <slot ns> <source> <late ns> <moves> <start ns> <granted ns> <first ns> <whys> <moved ns> <moved late ns>
//	                   a Wait on judged key i returned nil: the caller fires;
//	                   the slot it woke for, what granted it (reserve.Source:
//	                   0 Redis, 1 local, ...), how late after the slot Wait
//	                   says it woke, its fresh slots, when the Wait began
//	                   and when its slot was granted (Options.Tracer);
//	                   then the slot first granted and why it moved
//	                   ("-": it did not; else the reasons, comma-separated),
//	                   when the last move's fresh slot came and how long
//	                   after the slot it left (0 0: none)
//	e <ns> <c|j> [text] a Wait failed; the text when it differs from this
//	                   process's previous error's
//	f <ns> <0|1>       Metrics.Fallback: 1 to local pacing, 0 back on Redis
//	l <ns> <i>         the local fallback granted a reservation (i: the
//	                   judged key's index, -1 for a cold key)
//	x <ns> <op> [text] a Redis call failed (Metrics.RedisCall); the text
//	                   when it differs from the previous one's
//	u <ns> <cpu ns> <op>=<n>...
//	                   this process's CPU time (user + system), and its
//	                   Redis calls by operation so far, every second
//	end                the run is over and the Limiter closed

// clusterMetrics is a cluster child's reserve.Metrics. It prints from the
// "ready" line on (the warm-up's events are not printed: "ready" comes
// first).
type clusterMetrics struct {
	out     seamsOut
	judged  map[string]int
	started atomic.Bool
	mu      sync.Mutex
	last    string           // the last failed call's text
	ops     map[string]int64 // Redis calls by operation, from "ready" on
}

// opsLine returns the Redis calls by operation so far, "op=n" sorted.
func (m *clusterMetrics) opsLine() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, op := range slices.Sorted(maps.Keys(m.ops)) {
		out = append(out, op+"="+strconv.FormatInt(m.ops[op], 10))
	}
	return strings.Join(out, " ")
}

func (m *clusterMetrics) Reserved(key string, _ []string, _ []float64, _ time.Duration, local bool) {
	if local && m.started.Load() {
		i, ok := m.judged[key]
		if !ok {
			i = -1
		}
		m.out.line('l', time.Now().UnixNano(), strconv.Itoa(i))
	}
}
func (*clusterMetrics) Moved(string, string)         {}
func (*clusterMetrics) Paused(string, time.Duration) {}
func (*clusterMetrics) Evictable(string)             {}
func (m *clusterMetrics) Fallback(active bool) {
	if m.started.Load() {
		m.out.line('f', time.Now().UnixNano(), boolDigit(active))
	}
}
func (m *clusterMetrics) RedisCall(op string, _ time.Duration, err error) {
	if !m.started.Load() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops[op]++
	if err == nil {
		return
	}
	text := strings.Join(strings.Fields(err.Error()), " ")
	if text == m.last {
		m.out.line('x', time.Now().UnixNano(), op)
		return
	}
	m.last = text
	m.out.line('x', time.Now().UnixNano(), op, text)
}

// judgedTrace is one judged Wait's trace (Options.Tracer): the slot it
// woke for and what granted it. Its goroutine reads it after the Wait.
type judgedTrace struct {
	start, granted time.Time // when the Wait began, when its slot was granted
	slot           time.Time
	source         reserve.Source
	late           time.Duration
	moves          int
	first          time.Time     // the slot first granted
	whys           []string      // why each move (reserve.MovedLate, ...)
	movedAt        time.Time     // when the last move's fresh slot came
	movedLate      time.Duration // how late after the slot it left the last move came
}

func (t *judgedTrace) Reserved(r *reserve.Reservation) {
	t.slot, t.source, t.moves, t.granted = r.Time(), r.Source(), 0, time.Now()
	t.first, t.whys, t.movedAt, t.movedLate = t.slot, t.whys[:0], time.Time{}, 0
}
func (*judgedTrace) Sleeping(*reserve.Reservation, time.Duration) {}
func (t *judgedTrace) Moved(r *reserve.Reservation, why string) {
	t.movedAt = time.Now()
	t.movedLate = t.movedAt.Sub(t.slot)
	t.slot, t.source = r.Time(), r.Source()
	t.moves++
	t.whys = append(t.whys, why)
}
func (t *judgedTrace) End(_ error, late time.Duration) { t.late = late }

// whysField is a j line's last field: the moves' reasons, "-" for none.
func whysField(whys []string) string {
	if len(whys) == 0 {
		return "-"
	}
	return strings.Join(whys, ",")
}

// judgedTraceKey carries a judged Wait's trace in its context.
type judgedTraceKey struct{}

// clusterTracer hands each judged Wait the trace its context carries, and
// the other Waits none.
type clusterTracer struct{}

func (clusterTracer) StartWait(ctx context.Context, _ string) (context.Context, reserve.WaitTrace) {
	if t, ok := ctx.Value(judgedTraceKey{}).(*judgedTrace); ok {
		return ctx, t
	}
	return ctx, nopTrace{}
}

type nopTrace struct{}

func (nopTrace) Reserved(*reserve.Reservation)                {}
func (nopTrace) Sleeping(*reserve.Reservation, time.Duration) {}
func (nopTrace) Moved(*reserve.Reservation, string)           {}
func (nopTrace) End(error, time.Duration)                     {}

// runAsClusterChild runs this process as one process of the cluster phase,
// if it is one, and returns its exit code and true.
func runAsClusterChild() (code int, isChild bool) {
	return runChild(clusterChildEnv, "pacerbench cluster child", clusterChild)
}

// clusterChild is one process of the cluster phase: a Limiter as README's
// quick start makes it, on a Cluster client; a warm-up; "ready"; the start
// (Unix ns) on a line of stdin, then the cold keys' schedule and the judged
// keys' waiters until the stop (a second line, or EOF).
func clusterChild(j clusterJob) error {
	i := fleetproc.Index()
	if i < 0 || i >= j.Procs {
		return fmt.Errorf("fleet index %d of %d", i, j.Procs)
	}
	// One P, as a worker in a container of one CPU: hundreds of processes
	// share this machine's few cores, and each runtime's threads and
	// parallel GC would only contend for them.
	runtime.GOMAXPROCS(1)
	var out seamsOut
	m := &clusterMetrics{out: out, judged: map[string]int{}, ops: map[string]int64{}}
	for n, k := range j.Judged {
		m.judged[k] = n
	}
	// README's quick start on Cluster: go-redis's log to slog at Debug, a
	// Cluster client with go-redis's defaults, New with RequireRedis. The
	// fields added: Metrics, to see the switches and failed calls, a
	// Tracer, to learn each judged Wait's slot and what granted it, and a
	// Logger at Warn on stderr (the parent keeps it).
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	redis.SetLogger(reserve.RedisLogger(log))
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: j.Seeds})
	defer rdb.Close()
	// A rolling start: process i starts i × StartGap after the first.
	time.Sleep(time.Duration(i) * j.StartGap)
	// A process whose New fails (RequireRedis: its first heartbeat timed
	// out, and its ping confirmed nothing) is restarted, as a supervisor
	// would, a second later: counted and reported.
	var (
		l        *reserve.Limiter
		err      error
		newFails int
		newErr   string
	)
	for {
		if l, err = reserve.New(rdb, reserve.Options{RequireRedis: true, Logger: log, Metrics: m, Tracer: clusterTracer{}}); err == nil {
			break
		}
		if newFails++; newFails == 1 {
			newErr = strings.Join(strings.Fields(err.Error()), " ")
		}
		if newFails == clusterNewTries {
			return err
		}
		time.Sleep(time.Second)
	}
	defer l.Close()
	coldLim := reserve.Limit{Rate: j.ColdLimit.Rate, Burst: j.ColdLimit.Burst}
	judgedLim := reserve.Limit{Rate: j.JudgedLimit.Rate, Burst: j.JudgedLimit.Burst}

	// Warm up on keys of this process's own, likely on every master:
	// connections, scripts. At a limit no share of which waits: while the
	// fleet starts, a member counts the members it has not heard yet as
	// held and reserves only its share of each band, and a cold key's
	// share of its burst of 1 waits for seconds.
	warm := reserve.Limit{Rate: 1000, Burst: 1000}
	for n := range 8 {
		if err := l.Wait(context.Background(), "warmup:"+strconv.Itoa(os.Getpid())+":"+strconv.Itoa(n), warm); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	m.mu.Lock() // no line of the Metrics before "ready"
	fmt.Println("ready")
	m.started.Store(true)
	m.mu.Unlock()
	if newFails > 0 {
		out.line('n', time.Now().UnixNano(), strconv.Itoa(newFails), newErr)
	}
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return errors.New("no start line on stdin")
	}
	startNs, err := strconv.ParseInt(strings.TrimSpace(in.Text()), 10, 64)
	if err != nil {
		return fmt.Errorf("start line %q: %w", in.Text(), err)
	}
	start := time.Unix(0, startNs)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		in.Scan() // the stop line, or EOF
		stop()
	}()
	time.Sleep(time.Until(start))
	if dir := os.Getenv(clusterProfileEnv); dir != "" {
		stop, err := startCPUProfile(dir, fmt.Sprintf("cluster-%d-%d.pprof", j.Procs, i))
		if err != nil {
			return err
		}
		defer stop()
		defer func() {
			if h, err := os.Create(filepath.Join(dir, fmt.Sprintf("cluster-%d-%d.heap", j.Procs, i))); err == nil {
				_ = pprof.WriteHeapProfile(h)
				h.Close()
			}
		}()
		go func() {
			<-ctx.Done()
			fmt.Fprintf(os.Stderr, "pacerbench cluster child %d: %d goroutines at the stop\n", i, runtime.NumGoroutine())
		}()
	}

	var (
		wg     sync.WaitGroup
		errMu  sync.Mutex
		errTxt string
	)
	failed := func(kind string, err error) {
		at := time.Now().UnixNano()
		text := strings.Join(strings.Fields(err.Error()), " ")
		errMu.Lock()
		defer errMu.Unlock()
		if text == errTxt {
			out.line('e', at, kind)
			return
		}
		errTxt = text
		out.line('e', at, kind, text)
	}
	// CPU, every second.
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			out.line('u', time.Now().UnixNano(), strconv.FormatInt(int64(cpuTime()), 10), m.opsLine())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	// The judged keys' waiters: Wait, fire, again.
	for n, key := range j.Judged {
		for range j.Waiters {
			wg.Go(func() {
				if sleep(ctx, time.Until(start.Add(j.JudgedAfter))) != nil {
					return
				}
				idx := strconv.Itoa(n)
				tr := &judgedTrace{}
				tctx := context.WithValue(ctx, judgedTraceKey{}, tr)
				for {
					tr.start = time.Now()
					err := l.Wait(tctx, key, judgedLim)
					at := time.Now()
					if ctx.Err() != nil {
						return
					}
					if err != nil {
						failed("j", err)
						if sleep(ctx, 10*time.Millisecond) != nil {
							return
						}
						continue
					}
					out.line('j', at.UnixNano(), idx, strconv.FormatInt(tr.slot.UnixNano(), 10), strconv.Itoa(int(tr.source)),
						strconv.FormatInt(int64(tr.late), 10), strconv.Itoa(tr.moves),
						strconv.FormatInt(tr.start.UnixNano(), 10), strconv.FormatInt(tr.granted.UnixNano(), 10),
						strconv.FormatInt(tr.first.UnixNano(), 10), whysField(tr.whys),
						strconv.FormatInt(tr.movedAt.UnixNano(), 10), strconv.FormatInt(int64(tr.movedLate), 10))
				}
			})
		}
	}
	// The cold keys, on their schedule, each call on a goroutine of its
	// own so that a slow one does not hold the schedule.
	var calls sync.WaitGroup
	for r := 0; ctx.Err() == nil; r++ {
		for n := 0; ; n++ {
			k, at, ok := j.coldCall(i, r, n)
			if !ok {
				break
			}
			if sleep(ctx, time.Until(start.Add(at))) != nil {
				break
			}
			calls.Go(func() {
				if err := l.Wait(ctx, hostName(k), coldLim); err != nil {
					if ctx.Err() == nil {
						failed("c", err)
					}
					return
				}
				out.line('c', time.Now().UnixNano(), strconv.Itoa(k))
			})
		}
	}
	calls.Wait()
	wg.Wait()
	out.line('u', time.Now().UnixNano(), strconv.FormatInt(int64(cpuTime()), 10), m.opsLine())
	if err := l.Close(); err != nil && !errors.Is(err, reserve.ErrClosed) {
		// Close's leave may time out on a loaded machine: reported, not
		// fatal (the run's figures do not depend on it).
		fmt.Fprintf(os.Stderr, "pacerbench cluster child: Close: %v\n", err)
	}
	fmt.Println("end")
	return nil
}

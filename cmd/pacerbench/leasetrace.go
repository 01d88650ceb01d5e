package main

import (
	"context"
	"fmt"
	"io"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// waitTracer is the lease child's diagnostic Tracer (leaseTraceEnv): how
// late the Waits woke, how late the moved ones were when they moved, and
// in which milliseconds of the run the moves fell.
type waitTracer struct {
	late    lateHist // Waits that returned nil: late at return
	atMove  lateHist // moves for lateness: late when they moved
	granted lateHist // every grant whose slot had passed when the Wait got it: by how much
	movedAt lateHist // the same for the grants that were moved for lateness
	future  atomic.Int64
	moveMu  sync.Mutex
	moveMS  map[int64]int // moves per millisecond of the run (Unix ms)
	started atomic.Int64
	calls   sync.Map // Redis calls by operation: string -> *atomic.Int64
	// conns counts the connections the quick-start client and pacer's
	// copy of it put to use (OnConnect, which go-redis runs at a
	// connection's first use); conns0 is the count, or the tuned client's
	// pool's count of connections it made (PoolStats), when the run began.
	conns  atomic.Int64
	conns0 int64
	connMu sync.Mutex
	connAt []int64 // when the quick-start client put a connection to use during the run: Unix ms
	run    atomic.Bool
}

// connected counts a connection of the quick-start client put to use
// (OnConnect), and notes when, during the run.
func (t *waitTracer) connected() {
	t.conns.Add(1)
	if t.run.Load() {
		t.connMu.Lock()
		t.connAt = append(t.connAt, time.Now().UnixMilli())
		t.connMu.Unlock()
	}
}

// startRun notes the connections put to use before the run: the
// quick-start client's (and its copy's) by OnConnect, the tuned client's,
// which pacer uses as it is, by its pool's count of connections it made.
func (t *waitTracer) startRun(rdb *redis.Client, quick bool) {
	t.conns0 = t.opened(rdb, quick)
	t.run.Store(true)
}

func (t *waitTracer) opened(rdb *redis.Client, quick bool) int64 {
	if quick {
		return t.conns.Load()
	}
	return int64(rdb.PoolStats().Misses)
}

// tracedCounts are the child's counts, and its Redis calls by operation.
type tracedCounts struct {
	*pacerCounts
	t *waitTracer
}

func (c tracedCounts) RedisCall(op string, _ time.Duration, _ error) {
	n, _ := c.t.calls.LoadOrStore(op, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// lateEdges are the histograms' upper bounds.
var lateEdges = []time.Duration{50 * time.Microsecond, 100 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}

type lateHist struct{ n [11]atomic.Int64 }

func (h *lateHist) add(d time.Duration) {
	i := 0
	for i < len(lateEdges) && d > lateEdges[i] {
		i++
	}
	h.n[i].Add(1)
}

func (h *lateHist) String() string {
	var b strings.Builder
	for i := range h.n {
		edge := "inf"
		if i < len(lateEdges) {
			edge = lateEdges[i].String()
		}
		fmt.Fprintf(&b, " ≤%s:%d", edge, h.n[i].Load())
	}
	return b.String()
}

func newWaitTracer() *waitTracer { return &waitTracer{moveMS: make(map[int64]int)} }

func (t *waitTracer) StartWait(ctx context.Context, _ string) (context.Context, reserve.WaitTrace) {
	t.started.Add(1)
	return ctx, &oneWait{t: t}
}

type oneWait struct {
	t    *waitTracer
	slot time.Time
	lag  time.Duration // how long the slot had passed when granted (<= 0: ahead)
}

func (w *oneWait) Reserved(r *reserve.Reservation) {
	w.slot = r.Time()
	w.lag = time.Since(w.slot)
	if w.lag > 0 {
		w.t.granted.add(w.lag)
	} else {
		w.t.future.Add(1)
	}
}
func (w *oneWait) Sleeping(*reserve.Reservation, time.Duration) {}
func (w *oneWait) Moved(r *reserve.Reservation, why string) {
	now := time.Now()
	if why == reserve.MovedLate {
		w.t.movedAt.add(max(w.lag, 0))
		w.t.atMove.add(now.Sub(w.slot))
		w.t.moveMu.Lock()
		w.t.moveMS[now.UnixMilli()]++
		w.t.moveMu.Unlock()
	}
	w.slot = r.Time()
}
func (w *oneWait) End(err error, late time.Duration) {
	if err == nil {
		w.t.late.add(late)
	}
}

// report writes the trace's figures, and the runtime's scheduling
// latencies and GC pauses since m0, to w.
func (t *waitTracer) report(w io.Writer, m0 []metrics.Sample, rdb *redis.Client, quick bool) {
	fmt.Fprintf(w, "trace: connections put to use during the run: %d (before it: %d)\n", t.opened(rdb, quick)-t.conns0, t.conns0)
	fmt.Fprintf(w, "trace: %d Waits; late at return:%s\n", t.started.Load(), t.late.String())
	fmt.Fprintf(w, "trace: late when moved:%s\n", t.atMove.String())
	fmt.Fprintf(w, "trace: %d granted ahead; passed when granted:%s\n", t.future.Load(), t.granted.String())
	fmt.Fprintf(w, "trace: moved ones, passed when granted:%s\n", t.movedAt.String())
	t.moveMu.Lock()
	most, total := 0, 0
	for _, n := range t.moveMS {
		most = max(most, n)
		total += n
	}
	fmt.Fprintf(w, "trace: %d moves in %d distinct ms, at most %d in one\n", total, len(t.moveMS), most)
	t.connMu.Lock()
	for _, at := range t.connAt {
		near := 0
		for ms := at - 2; ms <= at+10; ms++ {
			near += t.moveMS[ms]
		}
		fmt.Fprintf(w, "trace: a connection put to use at %d ms: %d moves from 2 ms before to 10 ms after\n", at, near)
	}
	t.connMu.Unlock()
	t.moveMu.Unlock()
	fmt.Fprint(w, "trace: Redis calls:")
	t.calls.Range(func(k, v any) bool {
		fmt.Fprintf(w, " %s %d", k, v.(*atomic.Int64).Load())
		return true
	})
	fmt.Fprintln(w)
	m1 := runtimeSamples()
	for i := range m1 {
		h0, h1 := m0[i].Value.Float64Histogram(), m1[i].Value.Float64Histogram()
		fmt.Fprintf(w, "trace: %s:%s\n", m1[i].Name, histDiff(h0, h1))
	}
}

// runtimeSamples reads the runtime's scheduling latencies and GC pauses.
func runtimeSamples() []metrics.Sample {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	return s
}

// histDiff summarizes h1 - h0 as counts over lateEdges' bounds.
func histDiff(h0, h1 *metrics.Float64Histogram) string {
	var out [11]uint64
	for i, c := range h1.Counts {
		c -= h0.Counts[i]
		lo := h1.Buckets[i]
		j := 0
		for j < len(lateEdges) && lo >= lateEdges[j].Seconds() {
			j++
		}
		out[j] += c
	}
	var b strings.Builder
	for i, c := range out {
		edge := "inf"
		if i < len(lateEdges) {
			edge = lateEdges[i].String()
		}
		fmt.Fprintf(&b, " <%s:%d", edge, c)
	}
	return b.String()
}

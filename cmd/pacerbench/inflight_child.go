package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// inflightChildEnv carries an inflight child's job.
const inflightChildEnv = "PACERBENCH_INFLIGHT_CHILD"

// What an inflight child does.
const (
	// inflightHandoff: after "ready", read "<start> <end>" (Unix ns) from
	// stdin and from start to end loop: Acquire the key's seat, call the
	// provider (X-Hold Hold), Done; print "g <ns>" when a seat is granted
	// and "r <ns>" just before it is given back; then the counts.
	inflightHandoff = "handoff"
	// inflightHolder: Acquire Seats seats, one call each, each calling the
	// provider with X-Hold 1h; print "held" once every call is sent, and
	// wait to be killed.
	inflightHolder = "holder"
)

// inflightJob is what an inflight child is told.
type inflightJob struct {
	Mode        string
	RedisURL    string
	ProviderURL string
	Key         string
	N           int           // the in-flight band's N
	Seats       int           // inflightHolder: calls held
	Hold        time.Duration // inflightHandoff: each call's hold at the provider
}

// inflightPolicy is a policy of one in-flight band of n on "requests".
func inflightPolicy(n int) reserve.Policy {
	return reserve.Policy{{Name: "open", Unit: "requests", InFlight: n}}
}

// oneRequest costs one request (one seat).
var oneRequest = reserve.Cost{"requests": 1}

// seatCounts is the inflight phase's reserve.Metrics and
// reserve.SeatMetrics: Redis calls by operation, seats taken (and of
// them handed off by a call that ended), waiters now, fallbacks.
type seatCounts struct {
	mu               sync.Mutex
	ops              map[string]int64
	taken, handedOff int64
	moved            atomic.Int64 // Metrics.Moved: a sleeper's slot moved (a pause, or woken too late)
	waiters          atomic.Int64
	fallbacks        atomic.Int64
}

func newSeatCounts() *seatCounts { return &seatCounts{ops: map[string]int64{}} }

func (*seatCounts) Reserved(string, []string, []float64, time.Duration, bool) {}
func (m *seatCounts) Moved(string, string)                                    { m.moved.Add(1) }
func (*seatCounts) Paused(string, time.Duration)                              {}
func (*seatCounts) Evictable(string)                                          {}
func (m *seatCounts) Fallback(active bool) {
	if active {
		m.fallbacks.Add(1)
	}
}
func (m *seatCounts) RedisCall(op string, _ time.Duration, _ error) {
	m.mu.Lock()
	m.ops[op]++
	m.mu.Unlock()
}
func (m *seatCounts) SeatsTaken(_, _ string, _ int, _ time.Duration, handedOff, _ bool) {
	m.mu.Lock()
	m.taken++
	if handedOff {
		m.handedOff++
	}
	m.mu.Unlock()
}
func (*seatCounts) SeatsHeld(string, string, int)        {}
func (m *seatCounts) SeatWaiters(_, _ string, delta int) { m.waiters.Add(int64(delta)) }

// take returns the counts since the last take, and starts anew.
func (m *seatCounts) take() (ops map[string]int64, taken, handedOff int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ops, taken, handedOff = m.ops, m.taken, m.handedOff
	m.ops, m.taken, m.handedOff = map[string]int64{}, 0, 0
	return ops, taken, handedOff
}

// quickStartLimiter is a Limiter as README's quick start builds it, its
// Metrics m, but without RequireRedis: under -race on a loaded machine
// New's first call took over CallTimeout (250 ms) and failed the phase;
// a Limiter that starts on its local fallback instead is counted
// (Fallback) and reported.
func quickStartLimiter(url string, m *seatCounts, log *slog.Logger) (*reserve.Limiter, func(), error) {
	rdb, err := quickStartClient(url)
	if err != nil {
		return nil, nil, err
	}
	l, err := reserve.New(rdb, reserve.Options{Metrics: m, Logger: log})
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return l, func() { l.Close(); rdb.Close() }, nil
}

// providerClient is an HTTP client that keeps a connection per worker.
func providerClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}}
}

// providerCall makes one call to url with X-Hold hold, reads the answer
// and returns its status.
func providerCall(ctx context.Context, hc *http.Client, url, host string, hold time.Duration) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/call", nil)
	if err != nil {
		return 0, err
	}
	req.Host = host
	req.Header.Set("X-Hold", hold.String())
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// handoffLoop calls key from now to end, one call at a time, on l: seat,
// provider call, Done; emit gets each grant ('g') and release ('r').
// It returns the calls the provider refused.
func handoffLoop(l *reserve.Limiter, hc *http.Client, j inflightJob, end time.Time, emit func(kind byte, ns int64)) (refused int, err error) {
	req := reserve.Request{Key: j.Key, Policy: inflightPolicy(j.N), Cost: oneRequest}
	ctx := context.Background()
	for time.Now().Before(end) {
		r, err := l.Acquire(ctx, req)
		if err != nil {
			return refused, err
		}
		emit('g', time.Now().UnixNano())
		code, err := providerCall(ctx, hc, j.ProviderURL, "handoff.test", j.Hold)
		if code == http.StatusTooManyRequests {
			refused++
		}
		emit('r', time.Now().UnixNano())
		r.Done()
		if err != nil {
			return refused, err
		}
	}
	return refused, nil
}

// runAsInflightChild runs this process as an inflight child, if it is one.
func runAsInflightChild() (code int, isChild bool) {
	return runChild(inflightChildEnv, "pacerbench inflight child", inflightChild)
}

func inflightChild(j inflightJob) error {
	var out seamsOut
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m := newSeatCounts()
	l, closeL, err := quickStartLimiter(j.RedisURL, m, log)
	if err != nil {
		return err
	}
	hc := providerClient()
	switch j.Mode {
	case inflightHolder:
		req := reserve.Request{Key: j.Key, Policy: inflightPolicy(j.N), Cost: oneRequest}
		var sent sync.WaitGroup
		for range j.Seats {
			if _, err := l.Acquire(context.Background(), req); err != nil {
				return err
			}
			sent.Add(1)
			go func() {
				sent.Done()
				providerCall(context.Background(), hc, j.ProviderURL, "crash.test", time.Hour)
			}()
		}
		sent.Wait()
		os.Stdout.Write([]byte("held\n"))
		select {} // until SIGKILL: the seats are never given back
	case inflightHandoff:
		defer closeL()
		// Warm up: dial and load the scripts on a key of this process's own.
		warm := inflightJob{Key: j.Key + ":warm:" + strconv.Itoa(os.Getpid()), N: 1, ProviderURL: j.ProviderURL, Hold: 0}
		if _, err := handoffLoop(l, hc, warm, time.Now().Add(100*time.Millisecond), func(byte, int64) {}); err != nil {
			return err
		}
		m.take()
		os.Stdout.Write([]byte("ready\n"))
		var start, end int64
		if _, err := fmt.Fscan(bufio.NewReader(os.Stdin), &start, &end); err != nil {
			return fmt.Errorf("reading the run's times: %w", err)
		}
		time.Sleep(time.Until(time.Unix(0, start)))
		refused, err := handoffLoop(l, hc, j, time.Unix(0, end), func(kind byte, ns int64) { out.line(kind, ns) })
		if err != nil {
			return err
		}
		ops, taken, handed := m.take()
		for _, op := range slices.Sorted(maps.Keys(ops)) {
			fmt.Printf("o 0 %s %d\n", op, ops[op])
		}
		fmt.Printf("h 0 %d %d %d %d\n", taken, handed, refused, m.fallbacks.Load())
		return nil
	}
	return fmt.Errorf("unknown mode %q", j.Mode)
}

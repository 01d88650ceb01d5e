package reserve

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/internal/redistest"
)

// TestStalledProbesTakeNoLocalSlot: a Limiter pacing locally whose probes
// of Redis fell behind their schedule (its process was off the CPU: the
// loop is held here, as a stopped process's is) takes no local slot until
// a probe has answered: the fleet may be back on Redis meanwhile, and the
// members back keep this one's share only for a while. Its caller waits
// for that probe, and takes its slot on Redis when the probe finds it.
// Before, the combination runner's seed 78 had a process stopped 3.5 s
// while it paced locally take local slots for 0.9 s after it resumed,
// beside another member on Redis at the whole rate.
func TestStalledProbesTakeNoLocalSlot(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	probes := &probeRecorder{}
	l, err := New(s.Client, Options{KeyPrefix: redistest.Prefix(t), Logger: slog.New(slog.DiscardHandler), Metrics: probes,
		HeartbeatInterval: 100 * time.Millisecond, ProbeInterval: 100 * time.Millisecond, CallTimeout: 100 * time.Millisecond, FailAfter: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	lim := Limit{Rate: 10, Burst: 1}
	s.Stop(t)
	r, err := l.Reserve(ctx, "k", lim)
	if err != nil {
		t.Fatal(err)
	}
	if r.Source() != SourceLocal {
		t.Fatalf("with Redis stopped: source %v, want local", r.Source())
	}
	// The loop stops at its next probe, as in a stopped process, until
	// released.
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before Close's cleanup runs: Close waits for the loop
	l.health.mu.Lock()
	l.health.stallHook = func() {
		select {
		case held <- struct{}{}:
			<-release
		default:
		}
	}
	l.health.mu.Unlock()
	<-held
	s.Restart(t)
	// Past the probes' schedule: the Limiter counts itself stalled.
	deadline := time.Now().Add(10 * time.Second)
	for !l.probesStalled() {
		if time.Now().After(deadline) {
			t.Fatal("the probes never counted as stalled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Once a stall is seen, a probe begun since does not end it: only its
	// answer does. A caller that came while the first probe after the
	// stall was under way took a local slot, where it was to wait for
	// that probe's answer (CI, quiet: "after the probe found Redis:
	// source local").
	l.health.mu.Lock()
	due := l.health.probeDue
	l.health.probing = time.Now()
	l.health.mu.Unlock()
	if !l.probesStalled() {
		t.Fatal("not stalled with a probe just begun after a stall, before it answered")
	}
	if _, err := l.TryReserveN(ctx, Single("k", lim, 1), 0); err == nil {
		t.Fatal("a local slot while the first probe after a stall was under way")
	}
	// Without a stall seen, a probe under way for longer than a probe
	// takes counts as stalled; one just begun does not.
	l.health.mu.Lock()
	l.health.stalled = false
	l.health.probeDue = time.Now()
	l.health.probing = time.Now()
	l.health.mu.Unlock()
	if l.probesStalled() {
		t.Fatal("stalled with a probe just begun on time")
	}
	l.health.mu.Lock()
	l.health.probing = due.Add(-l.confirmBudget() - time.Hour)
	l.health.mu.Unlock()
	if !l.probesStalled() {
		t.Fatal("not stalled with a probe begun an hour ago")
	}
	l.health.mu.Lock()
	l.health.probeDue = due
	l.health.probing = time.Time{}
	l.health.mu.Unlock()
	if _, err := l.TryReserveN(ctx, Single("k", lim, 1), 0); err == nil {
		t.Fatal("a local slot while the probes were stalled")
	}
	type granted struct {
		r  *Reservation
		at time.Time // when Reserve returned it
	}
	done := make(chan granted, 1)
	go func() {
		r, err := l.Reserve(ctx, "k", lim)
		if err != nil {
			t.Error(err)
		}
		done <- granted{r, time.Now()}
	}()
	select {
	case g := <-done:
		t.Fatalf("a caller got a slot (source %v) while the probes were stalled", g.r.Source())
	case <-time.After(300 * time.Millisecond):
	}
	released := time.Now()
	free() // the process runs again: the probe finds Redis
	select {
	case g := <-done:
		// On Redis, once the probe found it; or locally, only after a
		// probe since the release failed (its 100 ms CallTimeout can pass
		// on a loaded machine: the Limiter then paces locally, as it may).
		if g.r != nil && g.r.Source() != SourceRedis {
			if failed := probes.failedBetween(released, g.at); failed == "" {
				t.Fatalf("source %v before any probe since the release answered; want redis, or local after a failed probe", g.r.Source())
			} else {
				t.Logf("a local slot after a failed probe (%s)", failed)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the caller never got its slot")
	}
}

// probeRecorder records the heartbeats and probes that failed, and when.
type probeRecorder struct {
	noMetrics
	mu     sync.Mutex
	failed []probeFailure
}

type probeFailure struct {
	at  time.Time
	op  string
	err error
}

func (m *probeRecorder) RedisCall(op string, _ time.Duration, err error) {
	if err == nil || (op != names.OpHeartbeat && op != names.OpProbe) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failed = append(m.failed, probeFailure{time.Now(), op, err})
}

// failedBetween describes the first heartbeat or probe that failed after
// since and before until; "": none.
func (m *probeRecorder) failedBetween(since, until time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.failed {
		if f.at.After(since) && f.at.Before(until) {
			return f.op + ": " + f.err.Error()
		}
	}
	return ""
}

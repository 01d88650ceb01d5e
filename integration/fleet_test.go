package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/integration/combo"
	"github.com/pacer-go/pacer/integration/mixed"
	"github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// childSpec tells a child process what to pace and where Redis is.
type childSpec struct {
	Mode       string   // "url", "sentinel" or "cluster"
	URL        string   // Mode "url"
	URLs       []string // Mode "url": child i uses URLs[i] instead, if set
	MasterName string   // Mode "sentinel"
	Addrs      []string // sentinel or cluster node addresses
	Prefix     string
	Key        string
	Rate       float64
	Burst      int
	Goroutines int
	Start, End int64 // Unix ns
}

// childEnv carries a child's childSpec (see package internal/fleet).
const childEnv = "PACER_FLEET_CHILD"

// TestMain runs the child side when childEnv holds a childSpec (or when
// TestCombination or TestMixedFleet re-ran the binary, see combo.Main and
// mixed.Main), and removes the
// examples the tests built.
func TestMain(m *testing.M) {
	combo.Main()
	mixed.Main() // a Go process of TestMixedFleet
	var spec childSpec
	if ok, err := fleet.Spec(childEnv, &spec); ok {
		if err == nil {
			err = childMain(spec)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	removeBuilds()
	os.Exit(code)
}

// switchLog is a reserve.Metrics that prints every fallback switch.
type switchLog struct {
	mu  sync.Mutex
	out *bufio.Writer
}

func (s *switchLog) line(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format+"\n", args...)
}
func (s *switchLog) Reserved(string, []string, []float64, time.Duration, bool) {}
func (s *switchLog) Moved(string, string)                                      {}
func (s *switchLog) RedisCall(string, time.Duration, error)                    {}
func (s *switchLog) Paused(string, time.Duration)                              {}
func (s *switchLog) Evictable(string)                                          {}
func (s *switchLog) Fallback(active bool) {
	to := "redis"
	if active {
		to = "local"
	}
	s.line("switch %d %s", time.Now().UnixNano(), to)
}

// childMain paces Spec.Key with default Options from many goroutines and
// prints "call <start ns> <end ns>" for every Wait, "switch <ns> <to>" for
// every fallback switch and "err <ns> <message>" for every Wait error.
func childMain(s childSpec) error {
	var rdb redis.UniversalClient
	switch s.Mode {
	case "url":
		url := s.URL
		if i := fleet.Index(); i >= 0 && i < len(s.URLs) {
			url = s.URLs[i]
		}
		opts, err := redis.ParseURL(url)
		if err != nil {
			return err
		}
		rdb = redis.NewClient(opts)
	case "sentinel":
		rdb = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.Addrs})
	case "cluster":
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs})
	default:
		return fmt.Errorf("unknown mode %q", s.Mode)
	}
	defer rdb.Close()
	// go-redis's own dial errors (several per failed call) at Debug, off:
	// pacer logs each switch once, with its cause.
	redis.SetLogger(reserve.RedisLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	out := bufio.NewWriter(os.Stdout)
	log := &switchLog{out: out}
	l, err := reserve.New(rdb, reserve.Options{KeyPrefix: s.Prefix, Metrics: log,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return err
	}
	lim := reserve.Limit{Rate: s.Rate, Burst: s.Burst}
	time.Sleep(time.Until(time.Unix(0, s.Start)))
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, s.End))
	defer cancel()
	var wg sync.WaitGroup
	for range s.Goroutines {
		wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				err := l.Wait(ctx, s.Key, lim)
				end := time.Now()
				var tooLong *reserve.WaitTooLongError
				switch {
				case err == nil:
					log.line("call %d %d", start.UnixNano(), end.UnixNano())
				case errors.As(err, &tooLong), errors.Is(err, context.DeadlineExceeded):
					return // the run is over
				default:
					log.line("err %d %s", end.UnixNano(), strings.ReplaceAll(err.Error(), "\n", " "))
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	return out.Flush()
}

// call is one Wait that returned nil.
type call struct {
	start, end int64
	child      int
}

type switchEvent struct {
	at    int64
	child int
	to    string
}

// fleetRun is what the children reported.
type fleetRun struct {
	calls    []call // sorted by end
	switches []switchEvent
	errs     []string
	stderr   []string
}

// runFleet starts procs children pacing spec.Key from start to end, runs
// during(ctx) in the parent meanwhile (the fault), and collects the reports.
func runFleet(t *testing.T, procs int, spec childSpec, during func()) fleetRun {
	t.Helper()
	f, err := fleet.Start(t.Context(), fleet.Options{Env: childEnv, Spec: spec, Procs: procs, Args: []string{"-test.run=^$"}})
	if err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during()
	}
	var run fleetRun
	_ = f.Wait() // each child's error is reported below
	for _, c := range f.Children() {
		calls, switches, errs := parseChild(c.Index, c.Lines())
		run.calls = append(run.calls, calls...)
		run.switches = append(run.switches, switches...)
		run.errs = append(run.errs, errs...)
		run.stderr = append(run.stderr, c.Stderr())
		if err := c.Wait(); err != nil {
			t.Errorf("child %d: %v\n%s", c.Index, err, c.Stderr())
		}
	}
	slices.SortFunc(run.calls, func(a, b call) int { return int(a.end - b.end) })
	slices.SortFunc(run.switches, func(a, b switchEvent) int { return int(a.at - b.at) })
	return run
}

func parseChild(child int, lines []string) (calls []call, switches []switchEvent, errs []string) {
	for _, line := range lines {
		f := strings.SplitN(line, " ", 3)
		if len(f) < 3 {
			continue
		}
		a, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "call":
			b, _ := strconv.ParseInt(f[2], 10, 64)
			calls = append(calls, call{a, b, child})
		case "switch":
			switches = append(switches, switchEvent{a, child, f[2]})
		case "err":
			errs = append(errs, f[2])
		}
	}
	return calls, switches, errs
}

// window describes the calls that ended in [from, from+w): per child, and
// per 100 ms, with the switches of mode around it, for a failure's message.
func (r fleetRun) window(from time.Time, w time.Duration, start time.Time) string {
	var b strings.Builder
	perChild := map[int]int{}
	buckets := make([]map[int]int, (w+99*time.Millisecond)/(100*time.Millisecond))
	for _, c := range r.calls {
		if c.end < from.UnixNano() || c.end >= from.Add(w).UnixNano() {
			continue
		}
		perChild[c.child]++
		i := int((c.end - from.UnixNano()) / int64(100*time.Millisecond))
		if buckets[i] == nil {
			buckets[i] = map[int]int{}
		}
		buckets[i][c.child]++
	}
	fmt.Fprintf(&b, "calls by child in the %v from %v: %v; per 100 ms:", w, from.Sub(start).Round(time.Millisecond), perChild)
	for _, m := range buckets {
		fmt.Fprintf(&b, " %v", m)
	}
	b.WriteString("; switches:")
	for _, sw := range r.switches {
		if at := time.Unix(0, sw.at); at.After(from.Add(-3*time.Second)) && at.Before(from.Add(w+time.Second)) {
			fmt.Fprintf(&b, " child %d to %s at %v", sw.child, sw.to, at.Sub(start).Round(time.Millisecond))
		}
	}
	return b.String()
}

// countIn returns the calls that ended in [from, to).
func (r fleetRun) countIn(from, to time.Time) int {
	n := 0
	for _, c := range r.calls {
		if c.end >= from.UnixNano() && c.end < to.UnixNano() {
			n++
		}
	}
	return n
}

// longestWait returns the longest single Wait.
func (r fleetRun) longestWait() time.Duration {
	var d int64
	for _, c := range r.calls {
		d = max(d, c.end-c.start)
	}
	return time.Duration(d)
}

// longestGap returns the longest time in [from, to) with no call ending:
// the fleet stalled.
func (r fleetRun) longestGap(from, to time.Time) time.Duration {
	prev, gap := from.UnixNano(), int64(0)
	for _, c := range r.calls {
		if c.end < from.UnixNano() || c.end >= to.UnixNano() {
			continue
		}
		gap = max(gap, c.end-prev)
		prev = c.end
	}
	return time.Duration(max(gap, to.UnixNano()-prev))
}

// lastSwitch returns when the last child switched to "to" at or after
// after, and how many children did.
func (r fleetRun) lastSwitch(to string, after time.Time) (time.Time, int) {
	last := map[int]int64{}
	for _, s := range r.switches {
		if s.to == to && s.at >= after.UnixNano() {
			if _, ok := last[s.child]; !ok {
				last[s.child] = s.at
			}
		}
	}
	var t int64
	for _, at := range last {
		t = max(t, at)
	}
	return time.Unix(0, t), len(last)
}

// switchCounts returns how many switches each child made.
func (r fleetRun) switchCounts() map[int]int {
	n := map[int]int{}
	for _, s := range r.switches {
		n[s.child]++
	}
	return n
}

// busiest returns the most calls that ended in any window of length w, and
// when that window starts.
func (r fleetRun) busiest(w time.Duration) (int, time.Time) {
	best, at, j := 0, int64(0), 0
	for i, c := range r.calls { // sorted by end
		for r.calls[j].end <= c.end-int64(w) {
			j++
		}
		if n := i - j + 1; n > best {
			best, at = n, r.calls[j].end
		}
	}
	return best, time.Unix(0, at)
}

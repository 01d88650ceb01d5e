package main

// The exits measurement: a fleet killed (or closed) run after run, and how
// fast the next one gets the whole rate back.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pacer-go/pacer/admin"
)

// exitRun is one run of the exits measurement.
type exitRun struct {
	Name   string
	Killed bool          // this run's processes are SIGKILLed at its end (else they Close)
	After  string        // how the previous run's processes ended, or "" for none
	Gap    time.Duration // from the previous run's end to this run's start
	Gone   time.Duration // from the previous run's end until the fleet listed none of its members; -1: n/a
	// BeatMin and BeatMax: how long before the previous run's end its
	// members had last heartbeated, the least and the most.
	BeatMin, BeatMax time.Duration
	Seconds          float64
	Calls            int
	Rate             float64
	First3           float64 // calls/s over the first 3 s (or the run, if shorter)
	Buckets          []int   // calls in each whole second of the first 5 s
	Busiest          int     // the most calls in any 1 s
	Steal            time.Duration
	Errors           int
	ErrText          []string
}

// seamsExits runs the exits measurement's series: two graceful runs, or
// sc.Runs crash runs, one right after the other on a key prefix of their
// own. At a run's end the next run's processes are started at once
// (having SIGKILLed the run's, in a crash series), and once they are
// ready, their run begins.
func (b *bench) seamsExits(ctx context.Context, sc seamsConfig, killed bool, progress func(string, ...any)) ([]exitRun, error) {
	name, prefix, n, d, after := "graceful", "seams-close:", 2, sc.CloseRun, "Close"
	if killed {
		name, prefix, n, d, after = "crash", "seams-crash:", sc.Runs, sc.Run, "SIGKILL"
	}
	ac, err := admin.New(b.admin, admin.Options{KeyPrefix: prefix})
	if err != nil {
		return nil, err
	}
	watch := watchFleet(ctx, ac)
	defer watch.stop()
	job := seamsJob{RedisURL: b.url, KeyPrefix: prefix, Key: "api", Call: callWait, Rate: sc.Rate, Burst: 1, Goroutines: sc.Goroutines, Killed: killed}

	type run struct {
		f          *seamsFleet
		start, end time.Time
		steal      time.Duration
	}
	var (
		runs []run
		outs []seamsOutput
	)
	for i := range n {
		var prev *run
		if i > 0 {
			prev = &runs[i-1]
			if killed {
				prev.f.kill() // SIGKILL: no Close
			}
		}
		f, err := startSeamsFleet(ctx, job, sc.Procs)
		if err != nil {
			if prev != nil {
				prev.f.kill()
				_, _ = prev.f.finish()
			}
			return nil, fmt.Errorf("seams, %s run %d: %w", name, i+1, err)
		}
		if prev != nil {
			o, err := prev.f.finish()
			if err != nil {
				f.kill()
				_, _ = f.finish()
				return nil, fmt.Errorf("seams, %s run %d: %w", name, i, err)
			}
			outs = append(outs, o)
		}
		start := time.Now().Add(50 * time.Millisecond)
		end := start.Add(d)
		f.begin(start, end)
		time.Sleep(time.Until(start))
		cpu := readMachineCPU()
		time.Sleep(time.Until(end))
		runs = append(runs, run{f, start, end, stealSince(cpu)})
	}
	last := runs[n-1]
	if killed {
		last.f.kill()
	}
	o, err := last.f.finish()
	if err != nil {
		return nil, fmt.Errorf("seams, %s run %d: %w", name, n, err)
	}
	outs = append(outs, o)
	polls := watch.stop()

	out := make([]exitRun, n)
	for i, r := range runs {
		x := exitRow(outs[i], r.start, r.end)
		x.Name, x.Killed, x.Gone, x.Steal = fmt.Sprintf("%s %d", name, i+1), killed, -1, r.steal
		if i > 0 {
			x.After = after
			x.Gap = r.start.Sub(runs[i-1].end)
			x.Gone, x.BeatMin, x.BeatMax = gone(polls, runs[i-1].end)
		}
		gone := ""
		if x.Gone >= 0 {
			gone = fmt.Sprintf(", the previous processes gone %v after its end", x.Gone.Round(time.Millisecond))
		}
		progress("seams       %-10s %.1f/s, first 3 s %.1f/s, 1 s buckets %v%s", x.Name, x.Rate, x.First3, x.Buckets, gone)
		out[i] = x
	}
	return out, nil
}

// exitRow sums up the calls of a run from start to end.
func exitRow(o seamsOutput, start, end time.Time) exitRun {
	d := end.Sub(start)
	calls := callTimes(o.Calls, start, end)
	first := min(3*time.Second, d)
	x := exitRun{
		Seconds: d.Seconds(),
		Calls:   len(calls),
		Rate:    float64(len(calls)) / d.Seconds(),
		First3:  float64(len(between(calls, start, start.Add(first)))) / first.Seconds(),
		Busiest: busiest(calls, time.Second),
		Errors:  o.Errors,
		ErrText: o.ErrorText,
	}
	for k := time.Duration(0); k < 5 && (k+1)*time.Second <= d; k++ {
		x.Buckets = append(x.Buckets, len(between(calls, start.Add(k*time.Second), start.Add((k+1)*time.Second))))
	}
	return x
}

// callTimes returns the times (Unix ns, sorted) of the calls that returned
// from start to end.
func callTimes(calls []seamsCall, start, end time.Time) []int64 {
	var ts []int64
	for _, c := range calls {
		if c.At >= start.UnixNano() && c.At < end.UnixNano() {
			ts = append(ts, c.At)
		}
	}
	return ts
}

// between returns the part of sorted (Unix ns) in [a, b).
func between(sorted []int64, a, b time.Time) []int64 {
	i, _ := slices.BinarySearch(sorted, a.UnixNano())
	j, _ := slices.BinarySearch(sorted, b.UnixNano())
	return sorted[i:max(i, j)]
}

// fleetPoll is the fleet's members as admin.Client.Fleet listed them, at a time.
type fleetPoll struct {
	At    time.Time            // when the reply came
	Heard map[string]time.Time // each member's last heartbeat, by id
}

// fleetWatch lists a fleet's members every 50 ms until stopped.
type fleetWatch struct {
	once  sync.Once
	quit  chan struct{}
	done  chan struct{}
	polls []fleetPoll
}

func watchFleet(ctx context.Context, ac *admin.Client) *fleetWatch {
	w := &fleetWatch{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if ms, err := ac.Fleet(ctx); err == nil {
				p := fleetPoll{At: time.Now(), Heard: map[string]time.Time{}}
				for _, m := range ms {
					p.Heard[m.ID] = m.Heard
				}
				w.polls = append(w.polls, p)
			}
			select {
			case <-w.quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// stop stops the watch and returns its polls.
func (w *fleetWatch) stop() []fleetPoll {
	w.once.Do(func() { close(w.quit) })
	<-w.done
	return w.polls
}

// gone returns how long after t the fleet first listed none of the
// members it had listed before t (-1 if it never did), and how long before
// t those members had last heartbeated, the least and the most.
func gone(polls []fleetPoll, t time.Time) (after, beatMin, beatMax time.Duration) {
	var before map[string]time.Time // the last list before t
	after = -1
	for _, p := range polls {
		if p.At.Before(t) {
			before = p.Heard
			continue
		}
		left := false
		for id := range p.Heard {
			_, was := before[id]
			left = left || was
		}
		if !left {
			after = p.At.Sub(t)
			break
		}
	}
	beatMin = -1
	for _, heard := range before {
		d := t.Sub(heard)
		if beatMin < 0 || d < beatMin {
			beatMin = d
		}
		beatMax = max(beatMax, d)
	}
	return after, beatMin, beatMax
}

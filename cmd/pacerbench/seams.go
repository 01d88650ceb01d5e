package main

// The seams phase measures three places where pacer's features meet
// (docs/design.md, "When Redis fails" and "Where features meet"), each in
// child processes (seams_child.go) whose Limiter is made as the README's
// quick start makes it: redis.NewClient(&redis.Options{Addr: ...}) and
// reserve.New(rdb, reserve.Options{}) with only KeyPrefix, Logger and
// Metrics set.
//
//   - Exits without Close: a fleet on one key at 500/s, burst 1, runs
//     several times one right after the other on one key prefix; after each
//     run its processes are SIGKILLed (or, for the graceful baseline, return
//     and Close) and the next run's fresh processes start at once. How fast
//     the new fleet gets the whole rate back says how long the dead
//     members' shares were held.
//   - Recovery after an outage: two processes at 200/s through Redis
//     stopped and restarted empty, and through Redis frozen (SIGSTOP) and
//     thawed, on a redis-server of this phase's own.
//   - Exact windows: 16 goroutines on a window band of 30 per 2 s, alone
//     and beside a CPU hog per CPU: the calls in each window and the moves
//     Reservation.Sleep makes, by reason.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/pacer-go/pacer/reserve"
)

// seamsConfig is the seams phase's sizes.
type seamsConfig struct {
	// Exits without Close: Procs x Goroutines calling Wait at Rate, burst 1;
	// Runs crash runs of Run each, and two graceful runs of CloseRun.
	Procs, Goroutines int
	Rate              float64
	Runs              int
	Run, CloseRun     time.Duration
	// Recovery after an outage: OutProcs x OutGoroutines at OutRate,
	// burst 1; Normal, then the fault for Fault, then After.
	OutProcs, OutGoroutines int
	OutRate                 float64
	Normal, Fault, After    time.Duration
	// Exact windows: WinGoroutines in one process, WinN per WinLen, for
	// Windows windows.
	WinGoroutines int
	WinN          float64
	WinLen        time.Duration
	Windows       int
}

// seamsSizes returns the full run's sizes, or -quick's (the crash runs'
// length comes from -crash-run).
func seamsSizes(quick bool) seamsConfig {
	if quick {
		return seamsConfig{
			Procs: 2, Goroutines: 8, Rate: 500, Runs: 3, CloseRun: time.Second,
			OutProcs: 2, OutGoroutines: 8, OutRate: 200, Normal: time.Second, Fault: time.Second, After: 1500 * time.Millisecond,
			WinGoroutines: 16, WinN: 30, WinLen: time.Second, Windows: 2,
		}
	}
	return seamsConfig{
		Procs: 4, Goroutines: 16, Rate: 500, Runs: 3, CloseRun: 5 * time.Second,
		OutProcs: 2, OutGoroutines: 8, OutRate: 200, Normal: 4 * time.Second, Fault: 4 * time.Second, After: 6 * time.Second,
		WinGoroutines: 16, WinN: 30, WinLen: 2 * time.Second, Windows: 5,
	}
}

// seamsResults is what the seams phase measured.
type seamsResults struct {
	Cfg     seamsConfig
	Exits   []exitRun
	Outages []outageRun
	Windows []windowRun
	// Machine is the steal time and load over each measurement.
	Machine map[string]machineLoad
}

// machineLoad is what else the machine did over a measurement.
type machineLoad struct {
	Steal              time.Duration // /proc/stat steal; negative: unknown
	LoadStart, LoadEnd string        // /proc/loadavg's first three fields
	Elapsed            time.Duration
	start              machineCPU
	startTime          time.Time
}

func startMachineLoad() machineLoad {
	return machineLoad{start: readMachineCPU(), LoadStart: loadAverage(), startTime: time.Now()}
}

func (m machineLoad) finish() machineLoad {
	m.Steal = stealSince(m.start)
	m.LoadEnd = loadAverage()
	m.Elapsed = time.Since(m.startTime)
	return m
}

// stealSince returns the steal time (/proc/stat) since a, or -1.
func stealSince(a machineCPU) time.Duration {
	b := readMachineCPU()
	if !a.ok || !b.ok {
		return -1
	}
	return time.Duration((b.steal - a.steal) / ticksPerSecond * float64(time.Second))
}

// runSeams runs the seams phase.
func (b *bench) runSeams(ctx context.Context, progress func(string, ...any)) (*seamsResults, error) {
	sc := seamsSizes(b.cfg.Quick)
	sc.Run = b.cfg.CrashRun
	res := &seamsResults{Cfg: sc, Machine: map[string]machineLoad{}}

	m := startMachineLoad()
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	for _, killed := range []bool{false, true} {
		runs, err := b.seamsExits(ctx, sc, killed, progress)
		if err != nil {
			return nil, err
		}
		res.Exits = append(res.Exits, runs...)
	}
	res.Machine["exits"] = m.finish()

	m = startMachineLoad()
	for _, fault := range []string{faultStop, faultFreeze} {
		r, err := seamsOutage(ctx, sc, fault)
		if err != nil {
			return nil, err
		}
		progress("seams       outage, %-30s before %.1f/s, during %.1f/s, after %.1f/s, first Redis grant %v after the heal",
			r.Fault, r.Before, r.During, r.AfterRate, r.FirstRedis)
		res.Outages = append(res.Outages, r)
	}
	res.Machine["outage"] = m.finish()

	m = startMachineLoad()
	for _, busy := range []bool{false, true} {
		r, err := b.seamsWindows(ctx, sc, busy)
		if err != nil {
			return nil, err
		}
		progress("seams       windows, %d hogs: calls %v, pause moves %v, late moves %v", r.Hogs, r.Calls, r.Pause, r.Late)
		res.Windows = append(res.Windows, r)
	}
	res.Machine["windows"] = m.finish()
	return res, nil
}

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
	admin, err := reserve.NewAdmin(b.admin, reserve.AdminOptions{KeyPrefix: prefix})
	if err != nil {
		return nil, err
	}
	watch := watchFleet(ctx, admin)
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

// fleetPoll is the fleet's members as Admin.Fleet listed them, at a time.
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

func watchFleet(ctx context.Context, admin *reserve.Admin) *fleetWatch {
	w := &fleetWatch{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if ms, err := admin.Fleet(ctx); err == nil {
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

// The outage measurement's faults.
const (
	faultStop   = "stopped, restarted empty"
	faultFreeze = "frozen (SIGSTOP), thawed"
)

// outageRun is one run of the outage measurement.
type outageRun struct {
	Fault                     string
	Before, During, AfterRate float64 // calls/s
	Buckets                   []int   // calls in each whole second of the first 4 s after the heal
	// FirstRedis is the time from the heal to the first reservation Redis
	// granted (Reserve returned one that is not Local); -1: none.
	FirstRedis time.Duration
	// Back is, for each switch back to Redis after the heal, the time from
	// the heal.
	Back        []time.Duration
	Switches    int // switches to local pacing
	Steal       time.Duration
	LocalGrants int
	// Busiest is the most calls in any 1 s of the run, BusiestAt when
	// that second began (from the run's start); BusiestSlots the same of
	// the slots (Reservation.Time), which wake-up delays do not move.
	Busiest, BusiestSlots     int
	BusiestAt, BusiestSlotsAt time.Duration
	Calls                     int
	Errors                    int
	ErrText                   []string
}

// seamsOutage runs sc.OutProcs processes through fault, on a
// redis-server of its own.
func seamsOutage(ctx context.Context, sc seamsConfig, fault string) (outageRun, error) {
	srv, err := redisproc.Start(redisproc.Spec{})
	if err != nil {
		return outageRun{}, fmt.Errorf("seams, outage: %w", err)
	}
	defer srv.Close()
	job := seamsJob{RedisURL: srv.URL(), KeyPrefix: "seams-outage:", Key: "api", Call: callReserve, Rate: sc.OutRate, Burst: 1, Goroutines: sc.OutGoroutines}
	f, err := startSeamsFleet(ctx, job, sc.OutProcs)
	if err != nil {
		return outageRun{}, fmt.Errorf("seams, outage %s: %w", fault, err)
	}
	defer f.kill()
	start := time.Now().Add(50 * time.Millisecond)
	end := start.Add(sc.Normal + sc.Fault + sc.After)
	f.begin(start, end)

	time.Sleep(time.Until(start))
	cpu := readMachineCPU()
	time.Sleep(time.Until(start.Add(sc.Normal)))
	faultAt := time.Now()
	if fault == faultStop {
		srv.Stop()
	} else {
		err = srv.Freeze()
	}
	if err == nil {
		time.Sleep(time.Until(start.Add(sc.Normal + sc.Fault)))
		if fault == faultStop {
			err = srv.Restart()
		} else {
			err = srv.Thaw()
		}
	}
	healAt := time.Now()
	time.Sleep(time.Until(end))
	steal := stealSince(cpu)
	o, ferr := f.finish()
	if err != nil || ferr != nil {
		return outageRun{}, fmt.Errorf("seams, outage %s: %w", fault, errors.Join(err, ferr))
	}

	calls := callTimes(o.Calls, start, end)
	rate := func(a, b time.Time) float64 { return float64(len(between(calls, a, b))) / b.Sub(a).Seconds() }
	r := outageRun{
		Fault: fault, Before: rate(start, faultAt), During: rate(faultAt, healAt), AfterRate: rate(healAt, end),
		FirstRedis: -1, Calls: len(calls), Steal: steal, Errors: o.Errors, ErrText: o.ErrorText,
	}
	var slots []int64
	for _, c := range o.Calls {
		if c.At >= start.UnixNano() && c.At < end.UnixNano() {
			slots = append(slots, c.Slot)
		}
	}
	slices.Sort(slots)
	var at int64
	r.Busiest, at = busiestAt(calls, time.Second)
	r.BusiestAt = time.Duration(at - start.UnixNano())
	r.BusiestSlots, at = busiestAt(slots, time.Second)
	r.BusiestSlotsAt = time.Duration(at - start.UnixNano())
	for k := time.Duration(0); k < 4 && healAt.Add((k+1)*time.Second).Compare(end) <= 0; k++ {
		r.Buckets = append(r.Buckets, len(between(calls, healAt.Add(k*time.Second), healAt.Add((k+1)*time.Second))))
	}
	for _, c := range o.Calls {
		if c.At < start.UnixNano() || c.At >= end.UnixNano() {
			continue
		}
		if c.Local {
			r.LocalGrants++
		} else if c.Granted >= healAt.UnixNano() {
			if d := time.Duration(c.Granted - healAt.UnixNano()); r.FirstRedis < 0 || d < r.FirstRedis {
				r.FirstRedis = d
			}
		}
	}
	for _, s := range o.Switches {
		switch {
		case s.At < start.UnixNano() || s.At >= end.UnixNano():
		case s.What == "1":
			r.Switches++
		case s.At >= healAt.UnixNano():
			r.Back = append(r.Back, time.Duration(s.At-healAt.UnixNano()))
		}
	}
	return r, nil
}

// windowRun is one run of the exact-windows measurement.
type windowRun struct {
	Hogs        int   // CPU hogs beside it
	Calls       []int // per window
	Pause, Late []int // Sleep's moves per window, by reason
	Other       int   // moves for another reason (none is known)
	Errors      int
	ErrText     []string
}

// seamsWindows runs sc.WinGoroutines goroutines in one process on a window
// band of sc.WinN per sc.WinLen for sc.Windows windows, beside a CPU hog
// per CPU if busy.
func (b *bench) seamsWindows(ctx context.Context, sc seamsConfig, busy bool) (windowRun, error) {
	if err := b.flush(ctx); err != nil {
		return windowRun{}, err
	}
	r := windowRun{}
	if busy {
		r.Hogs = runtime.NumCPU()
		h, err := startHogs(r.Hogs)
		if err != nil {
			return windowRun{}, err
		}
		defer h.stop()
	}
	job := seamsJob{RedisURL: b.url, KeyPrefix: "seams-window:", Key: "api", Call: callWindow, WindowN: sc.WinN, Window: sc.WinLen, Goroutines: sc.WinGoroutines}
	f, err := startSeamsFleet(ctx, job, 1)
	if err != nil {
		return windowRun{}, fmt.Errorf("seams, windows: %w", err)
	}
	defer f.kill()
	// Windows are aligned to the Unix epoch on Redis's clock (this
	// machine's): the run starts with one.
	l := sc.WinLen.Nanoseconds()
	start := time.Unix(0, (time.Now().Add(100*time.Millisecond).UnixNano()/l+1)*l)
	end := start.Add(time.Duration(sc.Windows) * sc.WinLen)
	f.begin(start, end)
	time.Sleep(time.Until(end))
	o, err := f.finish()
	if err != nil {
		return windowRun{}, fmt.Errorf("seams, windows: %w", err)
	}
	r.Errors, r.ErrText = o.Errors, o.ErrorText
	r.Calls, r.Pause, r.Late = make([]int, sc.Windows), make([]int, sc.Windows), make([]int, sc.Windows)
	window := func(at int64) int {
		if at < start.UnixNano() || at >= end.UnixNano() {
			return -1
		}
		return int((at - start.UnixNano()) / l)
	}
	for _, c := range o.Calls {
		if w := window(c.At); w >= 0 {
			r.Calls[w]++
		}
	}
	for _, m := range o.Moves {
		w := window(m.At)
		switch {
		case w < 0:
		case m.What == reserve.MovedPause:
			r.Pause[w]++
		case m.What == reserve.MovedLate:
			r.Late[w]++
		default:
			r.Other++
		}
	}
	return r, nil
}

// tables renders the seams phase's tables, each with what it shows, what
// the issue measured before the fix, and the machine's steal and load.
func (s *seamsResults) tables() string {
	sc := s.Cfg
	var ts []table

	ex := table{
		title: "Seams: exits without Close",
		intro: fmt.Sprintf("%d processes x %d goroutines call `Wait` on one key at %s/s, burst 1, each process on "+
			"`reserve.New(redis.NewClient(&redis.Options{Addr: addr}), reserve.Options{})` (the README's quick start; only KeyPrefix, Logger and Metrics set). "+
			"A series is runs one right after the other on one key prefix: at each run's end its processes are SIGKILLed "+
			"(crash: no Close) or return from Wait and Close (graceful), the next run's %d fresh processes are started at once, "+
			"and their run begins once they are ready (\"start\": how long after the previous run's end). "+
			"`Admin.Fleet`, read every 50 ms, tells how long before the previous run's end its processes had last heartbeated (the most recent and the oldest), "+
			"and how long after that end it first listed none of them (\"members gone\"). "+
			"Calls are counted by the time `Wait` returned, in the run's whole seconds; the limit allows %s in any 1 s.",
			sc.Procs, sc.Goroutines, thousands(sc.Rate), sc.Procs, trim(sc.Rate+1)),
		header: []string{"run", "previous processes", "start", "their last heartbeats", "members gone", "length", "calls", "rate /s", "first 3 s /s",
			"0-1 s", "1-2 s", "2-3 s", "3-4 s", "4-5 s", "busiest 1 s", "steal", "errors"},
	}
	for _, x := range s.Exits {
		prev, start, beat, gone := "none (a new prefix)", "–", "–", "–"
		if x.After != "" {
			prev, start = x.After, dur(x.Gap)
			beat = fmt.Sprintf("%s to %s", dur(x.BeatMin), dur(x.BeatMax))
			gone = "not within the run"
			if x.Gone >= 0 {
				gone = dur(x.Gone)
			}
		}
		row := []string{x.Name, prev, start, beat, gone, dur(time.Duration(x.Seconds * float64(time.Second))), thousands(float64(x.Calls)),
			fmt.Sprintf("%.1f", x.Rate), fmt.Sprintf("%.1f", x.First3)}
		row = append(row, buckets(x.Buckets, 5)...)
		ex.rows = append(ex.rows, append(row, strconv.Itoa(x.Busiest), stealCell(x.Steal), strconv.Itoa(x.Errors)))
		ex.notes = append(ex.notes, errorNote(x.Name, x.ErrText)...)
	}
	ex.notes = append(ex.notes,
		"What it shows: how soon a fleet whose processes crashed gets the whole rate back. A killed process skips Close, so nothing gives its "+
			"share back: the fleet must find out. At a survivor's heartbeat (HeartbeatInterval, 1 s), a member silent for over 1.25 heartbeats whose "+
			"connection is gone from CLIENT LIST is removed, and one silent for over 2 is held (its share left to it); the others take a removed "+
			"member's share back at their next heartbeat. A process killed well after its last heartbeat is removed about 1 s after the kill, "+
			"before anyone holds it, and the new fleet keeps the whole rate. One killed just after a heartbeat (\"their last heartbeats\": "+
			"runs of a whole number of heartbeats put every kill there) is not yet a suspect at the survivors' first heartbeat, and at their "+
			"second is held by those that see it before it is removed: the run's third second is short until their next heartbeat. "+
			"`-crash-run 10.5s` puts the kill mid-interval. The first 100 ms of a crash run also lose the slots the killed processes had reserved. "+
			"**Before the fix** (figures reported in the issue, not measured by this program): the three crash runs made 499/s, 338/s and 217/s, "+
			"the dead members' shares held for SilentHold (1 min).",
		s.Machine["exits"].note())
	ts = append(ts, ex)

	out := table{
		title: "Seams: recovery after an outage",
		intro: fmt.Sprintf("%d processes x %d goroutines call `Reserve` then `Sleep` (Wait's two halves, so that `Reservation.Local` tells "+
			"a slot the local fallback granted from one Redis granted) on one key at %s/s, burst 1, quick-start client and `Options{}` as above, "+
			"on a redis-server of this phase's own: %v normal, then the fault for %v, then %v after the heal (the restarted server answering, or SIGCONT sent). "+
			"\"after\" is calls/s from the heal to the end, then in each whole second of the first 4 s after it. \"first Redis grant\": from the heal "+
			"to the first reservation Redis granted; \"back on Redis\": from the heal to each process's switch back (Metrics.Fallback). "+
			"The busiest 1 s is counted on the times the calls returned and on their slots (`Reservation.Time` after `Sleep`), each with when it began, "+
			"from the run's start (the fault begins at %v, the heal at about %v); the limit allows %s in any 1 s.",
			sc.OutProcs, sc.OutGoroutines, thousands(sc.OutRate), sc.Normal, sc.Fault, sc.After, sc.Normal, sc.Normal+sc.Fault, trim(sc.OutRate+1)),
		header: []string{"fault", "before /s", "during /s", "after /s", "+0-1 s", "+1-2 s", "+2-3 s", "+3-4 s",
			"first Redis grant", "back on Redis", "switches to local", "local grants", "busiest 1 s (from)", "busiest 1 s of slots (from)", "steal", "errors"},
	}
	for _, x := range s.Outages {
		first := "none"
		if x.FirstRedis >= 0 {
			first = dur(x.FirstRedis)
		}
		var back []string
		for _, d := range x.Back {
			back = append(back, dur(d))
		}
		if len(back) == 0 {
			back = []string{"none"}
		}
		row := []string{x.Fault, fmt.Sprintf("%.1f", x.Before), fmt.Sprintf("%.1f", x.During), fmt.Sprintf("%.1f", x.AfterRate)}
		row = append(row, buckets(x.Buckets, 4)...)
		out.rows = append(out.rows, append(row, first, strings.Join(back, ", "), strconv.Itoa(x.Switches), thousands(float64(x.LocalGrants)),
			fmt.Sprintf("%d (%.2f s)", x.Busiest, x.BusiestAt.Seconds()), fmt.Sprintf("%d (%.2f s)", x.BusiestSlots, x.BusiestSlotsAt.Seconds()),
			stealCell(x.Steal), strconv.Itoa(x.Errors)))
		out.notes = append(out.notes, errorNote(x.Fault, x.ErrText)...)
		if allow := int(sc.OutRate) + 1; x.BusiestSlots > allow {
			out.notes = append(out.notes, fmt.Sprintf("**%s: %d slots in the second from %.2f s, over rate + burst (%d).**",
				x.Fault, x.BusiestSlots, x.BusiestSlotsAt.Seconds(), allow))
		}
	}
	out.notes = append(out.notes,
		"What it shows: whether the fleet keeps the limit through a fault (each process paces locally at its share, half the rate each: "+
			"\"during\" should stay at or under the rate) and how soon it is back at the whole rate after it, with the busiest second at or under "+
			"rate + burst throughout. A probe finds Redis within a ProbeInterval (1 s ± 25%) of the heal; a process back on Redis leaves the "+
			"share of a member not heard from since the outage began until it hears it, so the first seconds after the heal may be short. "+
			"**Before the fix** (figures reported in the issue, not measured by this program): two processes at 200/s ran at 153/s and 164/s after recovery.",
		s.Machine["outage"].note())
	ts = append(ts, out)

	win := table{
		title: "Seams: exact windows and phantom pauses",
		intro: fmt.Sprintf("%d goroutines in one process call `WaitPolicy` on one key whose policy is one window band, "+
			"`reserve.Policy{{Name: \"w\", Window: reserve.PerWindow(%s, %v)}}`, cost `reserve.Cost{\"w\": 1}`, quick-start client and `Options{}` as above, "+
			"for %d windows from a window's start; then again with one CPU hog per CPU beside it. Calls are counted in the window in which `WaitPolicy` returned; "+
			"moves are `Metrics.Moved`'s, by reason: `pause` (a pause came to cover the slot) and `late` (the sleeper woke more than MaxLateness after its slot, "+
			"and took a fresh slot).",
			sc.WinGoroutines, trim(sc.WinN), sc.WinLen, sc.Windows),
		header: []string{"machine", "window", "calls (of " + trim(sc.WinN) + ")", "moved: pause", "moved: late"},
	}
	for _, x := range s.Windows {
		machine := "idle"
		if x.Hogs > 0 {
			machine = fmt.Sprintf("%d CPU hogs", x.Hogs)
		}
		var calls, pause, late int
		for i := range x.Calls {
			win.rows = append(win.rows, []string{machine, strconv.Itoa(i + 1), strconv.Itoa(x.Calls[i]), strconv.Itoa(x.Pause[i]), strconv.Itoa(x.Late[i])})
			calls, pause, late = calls+x.Calls[i], pause+x.Pause[i], late+x.Late[i]
		}
		win.rows = append(win.rows, []string{machine, "all", fmt.Sprintf("%d of %s", calls, trim(sc.WinN*float64(len(x.Calls)))), strconv.Itoa(pause), strconv.Itoa(late)})
		if x.Other > 0 {
			win.notes = append(win.notes, fmt.Sprintf("%s: %d moves for another reason.", machine, x.Other))
		}
		win.notes = append(win.notes, errorNote(machine, x.ErrText)...)
	}
	win.notes = append(win.notes,
		"What it shows: a window band hands out exactly its N in each window, and no sleeper gives up its slot for a pause that was never made. "+
			"Moves for `pause` must be 0 (nobody pauses the key); a `late` move (the process stalled past its slot, as hogs can make it) takes a fresh slot, "+
			"which may be in a later window, and may leave its window short. "+
			"**Before the fix** (figures reported in the issue, not measured by this program): 40 pause moves in one process, windows of 26, 22, 30 and 19.",
		s.Machine["windows"].note())
	ts = append(ts, win)

	var b strings.Builder
	for _, t := range ts {
		b.WriteString(t.markdown())
	}
	return b.String()
}

// buckets formats counts as n cells, "–" where the run had no whole second.
func buckets(counts []int, n int) []string {
	cells := make([]string, n)
	for i := range cells {
		cells[i] = "–"
		if i < len(counts) {
			cells[i] = strconv.Itoa(counts[i])
		}
	}
	return cells
}

// stealCell formats a run's steal time.
func stealCell(d time.Duration) string {
	if d < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func errorNote(name string, errs []string) []string {
	if len(errs) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("**%s: calls failed**, the first with: %s", name, errs[0])}
}

// note is m as a sentence.
func (m machineLoad) note() string {
	steal := "unknown"
	if m.Steal >= 0 {
		steal = fmt.Sprintf("%.1f CPU-seconds", m.Steal.Seconds())
	}
	return fmt.Sprintf("Over this measurement (%.0f s) the hypervisor took %s for other guests (/proc/stat steal); "+
		"load average (1, 5, 15 min) %s before, %s after.", m.Elapsed.Seconds(), steal, m.LoadStart, m.LoadEnd)
}

// busiestAt returns the most of sorted (Unix ns) in any window [t, t+w),
// and the earliest time of sorted that begins such a window.
func busiestAt(sorted []int64, w time.Duration) (n int, at int64) {
	j := 0
	for i, t := range sorted {
		for t-sorted[j] >= int64(w) {
			j++
		}
		if i-j+1 > n {
			n, at = i-j+1, sorted[j]
		}
	}
	return n, at
}

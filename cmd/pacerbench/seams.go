package main

// The seams phase measures three places where pacer's features meet
// (docs/design.md, "When Redis fails" and "Where features meet"), each in
// child processes (seams_child.go) whose Limiter is made as the README's
// quick start makes it: redis.NewClient(&redis.Options{Addr: ...}) and
// reserve.New(rdb, reserve.Options{}) with only KeyPrefix, Logger and
// Metrics set.
//
//   - Exits without Close (seams_exits.go): a fleet on one key at 500/s, burst 1, runs
//     several times one right after the other on one key prefix; after each
//     run its processes are SIGKILLed (or, for the graceful baseline, return
//     and Close) and the next run's fresh processes start at once. How fast
//     the new fleet gets the whole rate back says how long the dead
//     members' shares were held.
//   - Recovery after an outage (seams_outage.go): two processes at 200/s through Redis
//     stopped and restarted empty, and through Redis frozen (SIGSTOP) and
//     thawed, on a redis-server of this phase's own.
//   - Exact windows (seams_exact.go): 16 goroutines on a window band of 30 per 2 s, alone
//     and beside a CPU hog per CPU: the calls in each window and the moves
//     Reservation.Sleep makes, by reason.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
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
			"`admin.Client.Fleet`, read every 50 ms, tells how long before the previous run's end its processes had last heartbeated (the most recent and the oldest), "+
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
			"share back: the fleet must find out. At a survivor's heartbeat (HeartbeatInterval, 1 s), a member silent for over 1.1 heartbeats whose "+
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
		intro: fmt.Sprintf("%d goroutines in one process call `WaitN` on one key whose policy is one window band, "+
			"`reserve.Policy{{Name: \"w\", Window: reserve.Window{N: %s, Length: %v}}}`, cost `reserve.Cost{\"w\": 1}`, quick-start client and `Options{}` as above, "+
			"for %d windows from a window's start; then again with one CPU hog per CPU beside it. Calls are counted in the window in which `WaitN` returned; "+
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

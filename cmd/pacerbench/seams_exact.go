package main

// The exact-windows measurement: a window band, alone and beside CPU hogs,
// and the moves Sleep makes.

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

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

package main

// The outage measurement: two processes through Redis stopped and
// restarted empty, and frozen and thawed.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
)

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

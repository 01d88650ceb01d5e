package pacertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// A Recorder records every Wait it follows: set it as reserve.Options.Tracer
// (every Wait and WaitN of the Limiter) or pacehttp.Options.Tracer (every
// paced request's wait for its slot). A Recorder is safe for concurrent use;
// the zero value is ready to use.
type Recorder struct {
	mu    sync.Mutex
	waits []Wait
}

// A Wait is one wait for a slot, as a Recorder saw it.
type Wait struct {
	Key  string
	Cost reserve.Cost // what was reserved; nil if the wait was refused
	// Slot is the slot granted: the last, if the wait moved to a fresh
	// one (Moves). Zero if the wait was refused.
	Slot  time.Time
	Moves int
	// Woke is when the wait returned (time.Now), Err what it returned.
	Woke time.Time
	Err  error
}

// StartWait implements reserve.Tracer.
func (r *Recorder) StartWait(ctx context.Context, key string) (context.Context, reserve.WaitTrace) {
	return ctx, &trace{rec: r, w: Wait{Key: key}}
}

// trace follows one wait.
type trace struct {
	rec *Recorder
	w   Wait
}

func (t *trace) Reserved(res *reserve.Reservation) { t.w.Cost, t.w.Slot = res.Cost(), res.Time() }

func (t *trace) Sleeping(res *reserve.Reservation, d time.Duration) { t.w.Slot = res.Time() }

func (t *trace) Moved(res *reserve.Reservation, why string) {
	t.w.Slot = res.Time()
	t.w.Moves++
}

func (t *trace) End(err error, late time.Duration) {
	t.w.Woke, t.w.Err = time.Now(), err
	t.rec.mu.Lock()
	t.rec.waits = append(t.rec.waits, t.w)
	t.rec.mu.Unlock()
}

// Waits returns the waits recorded, in the order they returned.
func (r *Recorder) Waits() []Wait {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.waits)
}

// Slots returns the slots of the waits on key that succeeded, earliest
// first.
func (r *Recorder) Slots(key string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, w := range r.waits {
		if w.Key == key && w.Err == nil {
			out = append(out, w.Slot)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// Schedule returns the instants start+offsets[i]: a schedule to compare
// slots with (CheckSchedule).
func Schedule(start time.Time, offsets ...time.Duration) []time.Time {
	out := make([]time.Time, len(offsets))
	for i, d := range offsets {
		out[i] = start.Add(d)
	}
	return out
}

// CheckSchedule reports how the slots got differ from want: nil if they
// are the same instants, to the nanosecond, else an error naming the first
// that differs and by how much, or the count. Instants compare by their
// wall clock readings (the scripts' time), not their monotonic ones.
func CheckSchedule(got, want []time.Time) error {
	for i := range min(len(got), len(want)) {
		g, w := got[i].Round(0), want[i].Round(0)
		if !g.Equal(w) {
			return fmt.Errorf("pacertest: slot %d is %v, want %v (%v)", i, g, w, g.Sub(w))
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("pacertest: %d slots, want %d", len(got), len(want))
	}
	return nil
}

// CheckWindow reports an error if more than n of slots (in any order) lie
// in one window of length per: some instant t with more than n of them in
// [t, t+per). n must be at least 0 and per positive. Instants compare by
// their wall clock readings.
func CheckWindow(slots []time.Time, n int, per time.Duration) error {
	if n < 0 || per <= 0 {
		return fmt.Errorf("pacertest: CheckWindow(n=%d, per=%v): n must be at least 0 and per positive", n, per)
	}
	s := make([]time.Time, len(slots))
	for i, t := range slots {
		s[i] = t.Round(0)
	}
	slices.SortFunc(s, time.Time.Compare)
	for i := n; i < len(s); i++ {
		if d := s[i].Sub(s[i-n]); d < per {
			return fmt.Errorf("pacertest: %d slots within %v from %v, more than %d in any %v", n+1, d, s[i-n], n, per)
		}
	}
	return nil
}

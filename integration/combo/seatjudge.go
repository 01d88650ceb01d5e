package combo

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// VSeats: more than N seats open at the provider on KeySeats, or seats
// (or waits for seats) left behind by a process that ended cleanly.
const VSeats = "seats"

// The seats judge (KeySeats, seats.go):
//
//   - never over N: every call the provider refused for its seats (more
//     than N open with it, from arrival to the end of the response) is a
//     violation, but for those arriving after the run's end (counted:
//     the end cuts every call at once, each caller gives its seats back
//     as its call is cut, and the provider sees the connections close a
//     few ms later); and the verdict replays the provider's arrivals and ends
//     in their order (ASeq, ESeq) and checks that each admitted call's
//     count of open seats is the one the provider recorded (a mismatch is
//     the harness's);
//   - every call ended, in each process: a process that exited by itself
//     (the run's end, or told to Close) reports the seats its Limiter
//     still held and its calls still waiting (SeatMetrics), once all its
//     calls had returned: anything but 0 is a violation;
//   - every call ended, in Redis: once every fleet process has exited, a
//     ticket still holding or waiting for seats in the tickets' hash is a
//     violation when its Limiter's process exited by itself; one of a
//     process killed is reported (the fleet drops it at the next call on
//     the key after it forgot the process, and none may come);
//   - the band beside it, if any, is judged on the slots as every key's
//     (windows.go);
//   - reported, not judged: for each kill of a process holding seats in
//     Redis, the time until its tickets left Redis's count (the seats are
//     free again), and until a ticket that was waiting then held seats
//     (the seats went to a waiter); the seats open at the provider over
//     the run.

// seatEpisode: refusals over N this close together are one violation.
const seatEpisode = time.Second

// SeatFigures are what the seats judge measured.
type SeatFigures struct {
	Policy  string
	Calls   int // calls the provider saw on KeySeats
	Refused int // refused for more than N open
	// AfterEnd: refused for more than N open after the run's end, not
	// judged (see seats).
	AfterEnd int `json:",omitempty"`
	Limit    int // refused by the rate band (on arrival)
	Gone     int // ended by their caller's connection closing
	MaxOpen  int
	// MeanOpen: the seats open at the provider, on average over the run.
	MeanOpen float64
	// Full: the fraction of the run with N seats open at the provider.
	Full  float64
	Kills []SeatKill
	Stops []SeatStop
	// LeftKilled: tickets left in Redis at the end by killed processes.
	LeftKilled int
	// Handed, Free, LocalTaken: seats taken by hand-off, found free, on
	// the local fallback (the processes' SeatMetrics, summed).
	Handed, Free, LocalTaken int64
}

// SeatStop is a SIGSTOP of a process holding seats in Redis: the seats it
// held just before, and the fewest Redis counted for it while it was
// stopped (the fleet keeps a stopped member's seats: its connections are
// open).
type SeatStop struct {
	Child       string
	At          int64
	For         time.Duration
	Held, Least int
	// Fault: a Redis fault was in force during the stop (a restart loses
	// every seat until its holders renew them).
	Fault bool `json:",omitempty"`
}

// SeatKill is a kill of a process holding seats in Redis.
type SeatKill struct {
	Child string
	At    int64 // the kill (Unix ns)
	Held  int   // its seats in Redis just before
	// Freed: from the kill until its tickets had left Redis's count (-1:
	// never within the run); Handed: until a ticket waiting then held
	// seats (-1: none did, or none waited).
	Freed, Handed time.Duration
	Waiting       int // the others' tickets waiting when its seats were freed
	// Fault: a Redis fault was in force between the kill and the seats
	// freed (no script could drop them meanwhile).
	Fault bool `json:",omitempty"`
}

// seats judges KeySeats.
func (r *run) seats() ([]Violation, SeatFigures) {
	sd := r.res.Scenario.Seats
	if sd.N == 0 {
		return nil, SeatFigures{}
	}
	fig := SeatFigures{Policy: sd.String(), Kills: []SeatKill{}}
	var out []Violation
	calls := r.calls[KeySeats]
	fig.Calls = len(calls)

	// The provider's refusals over N, and the replay of its order.
	type ev struct {
		seq   int64
		at    int64
		delta int
		c     *Call
	}
	var evs []ev
	// The refusals over N, one violation per episode: refusals none more
	// than seatEpisode after the one before (a process whose call is
	// refused gives its seats back at once and takes them again).
	var ep *Violation
	var epLast int64
	epCount, epMost := 0, 0
	closeEp := func() {
		if ep != nil && epCount > 1 {
			ep.Msg += fmt.Sprintf("; with it %d refusals over N until %s, at most %d open", epCount-1, r.rel(epLast), epMost)
		}
	}
	for i := range calls {
		c := &calls[i]
		switch {
		case c.Why == "seats" && c.Arrive > r.res.End.UnixNano():
			// After the run's end, which cut every process's calls at
			// once: their callers gave the seats back (Done after the
			// cut) before the provider had seen their connections close,
			// and a call sent just before the end arrived meanwhile.
			// Counted, not judged: the provider's lag, not the fleet's.
			fig.AfterEnd++
		case c.Why == "seats":
			fig.Refused++
			if ep != nil && c.Arrive-epLast <= int64(seatEpisode) {
				epCount, epLast, epMost = epCount+1, c.Arrive, max(epMost, c.Open)
				continue
			}
			closeEp()
			out = append(out, Violation{Kind: VSeats, Key: KeySeats, At: c.Arrive, Msg: fmt.Sprintf(
				"the provider refused call %s (%s, child %s, %d seats, %s): %d seats open with it, N %d; open then: %s",
				c.ID, c.Kind, c.Child, int(c.Cost[unitRequests]), origin(*c), c.Open, sd.N, r.openAt(calls, c.ASeq))})
			ep, epCount, epLast, epMost = &out[len(out)-1], 1, c.Arrive, c.Open
		case c.Why == "limit":
			fig.Limit++
		case c.Status == 200:
			n := int(c.Cost[unitRequests])
			evs = append(evs, ev{c.ASeq, c.Arrive, n, c})
			end, eseq := c.End, c.ESeq
			if end == 0 {
				end, eseq = r.res.End.UnixNano(), math.MaxInt64
			}
			evs = append(evs, ev{eseq, end, -n, nil})
			if c.Gone {
				fig.Gone++
			}
		}
	}
	closeEp()
	slices.SortFunc(evs, func(a, b ev) int { return cmpInt(a.seq, b.seq) })
	open, last := 0, r.res.Start.UnixNano()
	var area, full float64
	for _, e := range evs {
		if t := min(max(e.at, r.res.Start.UnixNano()), r.res.End.UnixNano()); t > last {
			area += float64(open) * float64(t-last)
			if open >= sd.N {
				full += float64(t - last)
			}
			last = t
		}
		open += e.delta
		fig.MaxOpen = max(fig.MaxOpen, open)
		if e.c != nil && e.c.Open != open {
			out = append(out, Violation{Kind: VHarness, Key: KeySeats, At: e.at, Msg: fmt.Sprintf(
				"the provider recorded %d seats open with call %s, its order gives %d", e.c.Open, e.c.ID, open)})
		}
		if open > sd.N {
			out = append(out, Violation{Kind: VSeats, Key: KeySeats, At: e.at, Msg: fmt.Sprintf(
				"%d seats open at the provider, N %d (replayed from its records)", open, sd.N)})
		}
	}
	if span := float64(r.res.End.UnixNano() - r.res.Start.UnixNano()); span > 0 {
		fig.MeanOpen, fig.Full = area/span, full/span
	}

	// Leaks in the processes that ended by themselves.
	lims := map[string]string{} // limiter id -> child
	for _, n := range r.res.Notes {
		switch n.Type {
		case noteReady:
			if n.Lim != "" {
				lims[n.Lim] = n.Child
			}
		case noteDone:
			fig.Handed += n.Counts["seats-handed"]
			fig.Free += n.Counts["seats-free"]
			fig.LocalTaken += n.Counts["seats-local"]
			for _, k := range sortedKeys(n.Counts) {
				if strings.HasPrefix(k, countSeatsHeld) || strings.HasPrefix(k, countSeatWaiters) {
					out = append(out, Violation{Kind: VSeats, Key: KeySeats, At: r.res.End.UnixNano(), Msg: fmt.Sprintf(
						"child %s ended with %s = %d (its calls had all returned)", n.Child, k, n.Counts[k])})
				}
			}
		}
	}
	killed := map[string]int64{}
	for _, a := range r.res.Actions {
		if a.Kind == FaultKill {
			killed[a.Child] = a.At
		}
	}
	for id, e := range r.res.Exits {
		if strings.Contains(e, "killed") {
			killed[id] = r.res.End.UnixNano() // killed by the runner at the end: not clean
		}
	}

	// Leaks in Redis at the end.
	if end := r.res.SeatsEnd; end != nil {
		left := func(tk, what string) {
			lim := ticketLimiter(strings.Fields(tk)[0])
			child, ok := lims[lim]
			if _, dead := killed[child]; ok && dead {
				fig.LeftKilled++
				return
			}
			if !ok {
				child = "unknown (limiter " + lim + ")"
			}
			out = append(out, Violation{Kind: VSeats, Key: KeySeats, At: end.At, Msg: fmt.Sprintf(
				"ticket %s of child %s %s in Redis after every process exited (it ended by itself)", tk, child, what)})
		}
		if end.Err != "" {
			out = append(out, Violation{Kind: VHarness, Key: KeySeats, At: end.At, Msg: "the seats read at the end failed: " + end.Err})
		}
		for _, h := range end.Held {
			left(h, "still holds seats")
		}
		for _, w := range end.Waiting {
			left(w, "still waits")
		}
	}

	// A killed holder's seats back.
	for _, a := range r.res.Actions {
		if a.Kind != FaultKill {
			continue
		}
		var lim string
		for l, c := range lims {
			if c == a.Child {
				lim = l
			}
		}
		k, ok := r.seatKill(a, lim)
		if ok {
			fig.Kills = append(fig.Kills, k)
		}
	}
	for _, a := range r.res.Actions {
		if a.Kind != FaultStall {
			continue
		}
		for l, c := range lims {
			if c == a.Child {
				if st, ok := r.seatStop(a, l); ok {
					fig.Stops = append(fig.Stops, st)
				}
			}
		}
	}

	for _, b := range bandsOf(sd.ratePolicy()) {
		out = append(out, r.windows(KeySeats, b)...)
	}
	return out, fig
}

// openAt lists the calls open at the provider just before the arrival
// numbered seq.
func (r *run) openAt(calls []Call, seq int64) string {
	var parts []string
	for _, c := range calls {
		if c.Status == 200 && c.ASeq < seq && (c.ESeq == 0 || c.ESeq > seq) {
			parts = append(parts, fmt.Sprintf("%s(child %s, %d, since %s)", c.ID, c.Child, int(c.Cost[unitRequests]), r.rel(c.Arrive)))
		}
	}
	return strings.Join(parts, " ")
}

// heldBy returns the seats the tickets of Limiter lim hold in s.
func heldBy(s SeatSnap, lim string) int {
	n := 0
	for _, h := range s.Held {
		f := strings.Fields(h)
		if len(f) == 3 && ticketLimiter(f[0]) == lim {
			var c int
			_, _ = fmt.Sscan(f[2], &c)
			n += c
		}
	}
	return n
}

// seatStop measures stop a (SIGSTOP) of the process whose Limiter is lim:
// the seats it held in Redis just before, and the fewest it held while
// stopped (its tickets can only leave while it is stopped by the fleet
// dropping them); false if it held none.
func (r *run) seatStop(a Action, lim string) (SeatStop, bool) {
	st := SeatStop{Child: a.Child, At: a.At, For: time.Duration(a.End - a.At)}
	if lim == "" {
		return st, false
	}
	before, beforeAt := -1, a.At
	st.Least = math.MaxInt
	for _, s := range r.res.Seats {
		if s.Err != "" {
			continue
		}
		if s.At <= a.At {
			before, beforeAt = heldBy(s, lim), s.At
			continue
		}
		if s.At > a.End {
			break
		}
		st.Least = min(st.Least, heldBy(s, lim))
	}
	if before <= 0 {
		return st, false
	}
	st.Held = before
	// From the read it held them in (a fault may have kept the reader
	// from a later one).
	st.Fault = r.faultDuring(beforeAt, a.End)
	if st.Least == math.MaxInt {
		st.Least = before // no read changed while it was stopped
	}
	return st, true
}

// seatKill measures kill a of the process whose Limiter is lim in the
// runner's reads of the tickets' hash; false if it held no seats then.
func (r *run) seatKill(a Action, lim string) (SeatKill, bool) {
	snaps := r.res.Seats
	k := SeatKill{Child: a.Child, At: a.At, Freed: -1, Handed: -1}
	if lim == "" {
		return k, false
	}
	mine := func(s SeatSnap) int { return heldBy(s, lim) }
	i := 0
	for i < len(snaps) && snaps[i].At <= a.At {
		i++
	}
	// The last read before the kill that succeeded.
	j := i - 1
	for j >= 0 && snaps[j].Err != "" {
		j--
	}
	if j < 0 {
		return k, false
	}
	if k.Held = mine(snaps[j]); k.Held == 0 {
		return k, false
	}
	var waiting []string
	for ; i < len(snaps); i++ {
		s := snaps[i]
		if s.Err != "" {
			continue
		}
		if k.Freed < 0 {
			if mine(s) > 0 {
				continue
			}
			k.Freed = time.Duration(s.At - a.At)
			// The tickets of the others waiting in the read before:
			// those the seats could go to.
			for p := i - 1; p >= 0; p-- {
				if snaps[p].Err == "" {
					for _, w := range snaps[p].Waiting {
						if ticketLimiter(w) != lim {
							waiting = append(waiting, w)
						}
					}
					break
				}
			}
			k.Waiting = len(waiting)
			k.Fault = r.faultDuring(snaps[j].At, s.At)
		}
		for _, h := range s.Held {
			if slices.Contains(waiting, strings.Fields(h)[0]) {
				k.Handed = time.Duration(s.At - a.At)
				return k, true
			}
		}
	}
	return k, true
}

// short is the progress line's part: the policy, the most seats open, how
// much of the run they were all open, the refusals over N, and each kill's
// time until its seats were freed.
func (s SeatFigures) short(n int) string {
	var kills []string
	for _, k := range s.Kills {
		t := durText(k.Freed)
		if k.Fault {
			t += " (Redis fault)"
		}
		kills = append(kills, t)
	}
	out := fmt.Sprintf("seats %s: max open %d/%d, full %.2f, over N %d", s.Policy, s.MaxOpen, n, s.Full, s.Refused)
	if s.AfterEnd > 0 {
		out += fmt.Sprintf(" (and %d after the end, not judged)", s.AfterEnd)
	}
	if len(kills) > 0 {
		out += ", killed holder freed " + strings.Join(kills, " ")
	}
	for _, st := range s.Stops {
		out += fmt.Sprintf(", stopped holder %d→%d", st.Held, st.Least)
		if st.Fault {
			out += " (Redis fault)"
		}
	}
	return out
}

// durText formats d in ms, or "never" for a negative one.
func durText(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.Round(time.Millisecond).String()
}

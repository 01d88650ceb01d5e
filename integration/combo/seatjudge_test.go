package combo

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The seats judge on made-up runs (no timing): the provider's refusals
// over N, the replay of its order, the seats a process or Redis still held
// at the end, and a killed holder's seats read in the runner's snapshots.

// seatCall is a call of child on KeySeats of n seats, admitted at arrival
// seq a (d after the start) and ended at seq e (0: refused over N).
func seatCall(child string, n int, a, e int64, d, hold time.Duration, open int) Call {
	c := Call{ID: fmt.Sprintf("%s-%d", child, a), Key: KeySeats, Child: child, Kind: kindSeatAcquire, Status: 200,
		Cost: map[string]float64{unitRequests: float64(n)}, Arrive: at(d), ASeq: a, Open: open}
	if e == 0 {
		c.Status, c.Why = 429, "seats"
		return c
	}
	c.End, c.ESeq = at(d+hold), e
	return c
}

func seatsJudged(n int, calls []Call, notes []Note, actions []Action, snaps []SeatSnap, end *SeatSnap) Verdict {
	res := &Result{Start: start, End: start.Add(defaultLength), Scenario: Scenario{Length: defaultLength, Procs: procs, Seats: SeatsDraw{N: n}},
		Calls: calls, Notes: notes, Actions: actions, Seats: snaps, SeatsEnd: end}
	return Judge(res)
}

func TestSeatsOverN(t *testing.T) {
	// N 2: two calls open, the third refused; then one ends and another
	// is admitted.
	calls := []Call{
		seatCall("1", 1, 1, 4, time.Second, time.Second, 1),
		seatCall("2", 1, 2, 6, time.Second+ms2(10), 2*time.Second, 2),
		seatCall("3", 1, 3, 0, time.Second+ms2(20), 0, 3),
		seatCall("3", 1, 5, 7, 2*time.Second+ms2(30), time.Second, 2),
	}
	v := seatsJudged(2, calls, nil, nil, nil, &SeatSnap{At: at(defaultLength)})
	if got := kinds(v, VSeats); len(got) != 1 || !strings.Contains(got[0].Msg, "3 seats open with it, N 2") {
		t.Fatalf("seats violations %v, want the one refusal", got)
	}
	if f := v.Figures.Seats; f.MaxOpen != 2 || f.Refused != 1 || f.Calls != 4 {
		t.Errorf("figures %+v", f)
	}
	if got := kinds(v, VHarness); len(got) != 0 {
		t.Errorf("harness violations %v", got)
	}
	// Refusals within a second of each other are one violation, with their
	// count.
	more := append(calls[:len(calls):len(calls)], seatCall("3", 1, 8, 0, time.Second+ms2(500), 0, 3))
	v = seatsJudged(2, more, nil, nil, nil, &SeatSnap{At: at(defaultLength)})
	if got := kinds(v, VSeats); len(got) != 1 || !strings.Contains(got[0].Msg, "with it 1 refusals over N") {
		t.Errorf("an episode of two refusals: %v", got)
	}
	// The provider's recorded count must be its order's.
	bad := append([]Call(nil), calls...)
	bad[1].Open = 1
	if got := kinds(seatsJudged(2, bad, nil, nil, nil, &SeatSnap{At: at(defaultLength)}), VHarness); len(got) != 1 {
		t.Errorf("a count the order does not give: %v, want 1 harness violation", got)
	}
	// Admitted over N (a provider that let it through) is caught by the
	// replay.
	over := []Call{
		seatCall("1", 2, 1, 3, time.Second, time.Second, 2),
		seatCall("2", 1, 2, 4, time.Second+ms2(1), time.Second, 3),
	}
	if got := kinds(seatsJudged(2, over, nil, nil, nil, &SeatSnap{At: at(defaultLength)}), VSeats); len(got) != 1 {
		t.Errorf("3 open, N 2, admitted: %v, want 1 violation", got)
	}
}

func TestSeatsLeft(t *testing.T) {
	ready := []Note{{Type: noteReady, Child: "1", Lim: "h:1:a"}, {Type: noteReady, Child: "2", Lim: "h:2:b"}}
	kill := []Action{{Kind: FaultKill, Child: "2", At: at(5 * time.Second), End: at(6 * time.Second)}}
	for _, tc := range []struct {
		name   string
		notes  []Note
		end    SeatSnap
		want   int
		killed int
	}{
		{"nothing left", nil, SeatSnap{}, 0, 0},
		{"held by a process that ended by itself", []Note{{Type: noteDone, Child: "1", Counts: map[string]int64{countSeatsHeld + KeySeats: 1}}}, SeatSnap{}, 1, 0},
		{"waiting in a process that ended by itself", []Note{{Type: noteDone, Child: "1", Counts: map[string]int64{countSeatWaiters + KeySeats: 2}}}, SeatSnap{}, 1, 0},
		{"in Redis, of a process that ended by itself", nil, SeatSnap{Held: []string{"h:1:a.7 0 1"}}, 1, 0},
		{"waiting in Redis, of a process that ended by itself", nil, SeatSnap{Waiting: []string{"h:1:a.9"}}, 1, 0},
		{"in Redis, of a process killed", nil, SeatSnap{Held: []string{"h:2:b.3 1 2"}}, 0, 1},
		{"in Redis, of no process known", nil, SeatSnap{Held: []string{"h:9:z.1 2 1"}}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end := tc.end
			end.At = at(defaultLength + time.Second)
			v := seatsJudged(3, nil, append(append([]Note(nil), ready...), tc.notes...), kill, nil, &end)
			if got := kinds(v, VSeats); len(got) != tc.want {
				t.Errorf("violations %v, want %d", got, tc.want)
			}
			if got := v.Figures.Seats.LeftKilled; got != tc.killed {
				t.Errorf("left by killed processes %d, want %d", got, tc.killed)
			}
		})
	}
}

func TestSeatKill(t *testing.T) {
	ready := []Note{{Type: noteReady, Child: "1", Lim: "h:1:a"}, {Type: noteReady, Child: "2", Lim: "h:2:b"}}
	kill := []Action{{Kind: FaultKill, Child: "1", At: at(5 * time.Second), End: at(7 * time.Second)}}
	snaps := []SeatSnap{
		{At: at(4 * time.Second), Held: []string{"h:1:a.1 0 1", "h:1:a.2 0 1"}, Waiting: []string{"h:1:a.3", "h:2:b.1"}},
		{At: at(5*time.Second + ms2(100)), Err: "i/o timeout"},
		{At: at(6*time.Second + ms2(500)), Held: []string{"h:2:b.1 1 1"}},
	}
	v := seatsJudged(3, nil, ready, kill, snaps, &SeatSnap{At: at(defaultLength)})
	ks := v.Figures.Seats.Kills
	if len(ks) != 1 {
		t.Fatalf("kills %+v, want 1", ks)
	}
	k := ks[0]
	if k.Held != 2 || k.Freed != 1500*time.Millisecond || k.Handed != 1500*time.Millisecond || k.Waiting != 1 || k.Fault {
		t.Errorf("kill %+v, want 2 held, freed and handed after 1.5 s, 1 of the others waiting", k)
	}
	// A holder killed with nothing held is no figure.
	v = seatsJudged(3, nil, ready, []Action{{Kind: FaultKill, Child: "2", At: at(5 * time.Second)}}, snaps, &SeatSnap{At: at(defaultLength)})
	if ks := v.Figures.Seats.Kills; len(ks) != 0 {
		t.Errorf("kills %+v, want none (child 2 held nothing)", ks)
	}
}

func TestSeatStop(t *testing.T) {
	ready := []Note{{Type: noteReady, Child: "1", Lim: "h:1:a"}}
	stop := []Action{{Kind: FaultStall, Child: "1", At: at(5 * time.Second), End: at(7 * time.Second)}}
	for _, tc := range []struct {
		name        string
		during      []string
		held, least int
	}{
		{"kept", []string{"h:1:a.1 0 1", "h:1:a.2 0 2", "h:9:z.1 1 1"}, 3, 3},
		{"one dropped", []string{"h:1:a.2 0 2", "h:9:z.1 1 1"}, 3, 2},
	} {
		snaps := []SeatSnap{
			{At: at(4 * time.Second), Held: []string{"h:1:a.1 0 1", "h:1:a.2 0 2"}},
			{At: at(6 * time.Second), Held: tc.during},
			{At: at(8 * time.Second)},
		}
		v := seatsJudged(4, nil, ready, stop, snaps, &SeatSnap{At: at(defaultLength)})
		st := v.Figures.Seats.Stops
		if len(st) != 1 || st[0].Held != tc.held || st[0].Least != tc.least {
			t.Errorf("%s: stops %+v, want held %d, least %d", tc.name, st, tc.held, tc.least)
		}
	}
}

// TestSeatsAfterEnd: a refusal over N after the run's end is counted, not
// judged; one a moment before it is judged.
func TestSeatsAfterEnd(t *testing.T) {
	calls := []Call{
		seatCall("1", 2, 1, 3, defaultLength-time.Second, 2*time.Second, 2),
		seatCall("2", 1, 2, 0, defaultLength+ms2(10), 0, 3),
	}
	v := seatsJudged(2, calls, nil, nil, nil, &SeatSnap{At: at(defaultLength + time.Second)})
	if got := kinds(v, VSeats); len(got) != 0 || v.Figures.Seats.AfterEnd != 1 {
		t.Errorf("after the end: violations %v, after-end %d; want none and 1", got, v.Figures.Seats.AfterEnd)
	}
	calls[1].Arrive = at(defaultLength - ms2(10))
	if got := kinds(seatsJudged(2, calls, nil, nil, nil, &SeatSnap{At: at(defaultLength + time.Second)}), VSeats); len(got) != 1 {
		t.Errorf("before the end: violations %v, want 1", got)
	}
}

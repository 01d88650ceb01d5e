package combo

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// The verdict on made-up runs: each case builds the records a run would
// leave and checks what Judge makes of them. No timing is involved.

// start is a run's start on a 2 s window boundary, so that window
// indexes are easy to read.
var start = time.Unix(1_000_000, 0)

func at(d time.Duration) int64 { return start.Add(d).UnixNano() }

func ms2(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// slotCall is a reservation's call on key by child, its slot at d.
func slotCall(key, child string, d time.Duration, local bool) Call {
	t := at(d)
	c := Call{ID: fmt.Sprintf("%s-%d", child, t), Key: key, Child: child, Kind: "reserve", Slot: t, Exact: true,
		Placed: t, Lo: t, Hi: t, Grant: t - int64(100*time.Millisecond), Fire: t, Local: local, Arrive: t, Status: 200,
		Cost: map[string]float64{reserve.PermitsUnit: 1}}
	if key == KeyPolicy {
		c.Kind, c.Cost = "reservep", map[string]float64{unitRequests: 1, unitTokens: 100}
		c.Settle, c.Actual = true, 100
	}
	return c
}

// paced returns n calls on KeySliding from child, 1/30 s apart from d.
func paced(child string, d time.Duration, n int, every time.Duration, local bool) []Call {
	var out []Call
	for i := range n {
		out = append(out, slotCall(KeySliding, child, d+time.Duration(i)*every, local))
	}
	return out
}

func judged(calls []Call, notes []Note, actions []Action) Verdict {
	res := &Result{Start: start, End: start.Add(defaultLength), Scenario: Scenario{Length: defaultLength, Procs: procs},
		Calls: calls, Notes: notes, Actions: actions}
	return Judge(res)
}

// kinds returns the violations of kind, excluding throughput (the made-up
// runs are short).
func kinds(v Verdict, kind string) []Violation {
	var out []Violation
	for _, x := range v.Violations {
		if x.Kind == kind {
			out = append(out, x)
		}
	}
	return out
}

func TestWindowBucket(t *testing.T) {
	spacing := time.Second / 30
	for _, tc := range []struct {
		name  string
		calls []Call
		want  int
	}{
		{"on the rate", paced("1", time.Second, 60, spacing, false), 0},
		{"two processes interleaved on the rate", append(paced("1", time.Second, 30, 2*spacing, false), paced("2", time.Second+spacing, 30, 2*spacing, false)...), 0},
		{"one slot 1 ms too early", append(paced("1", time.Second, 30, spacing, false), slotCall(KeySliding, "2", time.Second+ms2(1), false)), 1},
		{"slots within slotEps of the rate", []Call{slotCall(KeySliding, "1", time.Second, false), slotCall(KeySliding, "2", time.Second+spacing-slotEps/2, false)}, 0},
		{"three Redis slots at once", []Call{slotCall(KeySliding, "1", time.Second, false), slotCall(KeySliding, "2", time.Second, false), slotCall(KeySliding, "3", time.Second, false)}, 1},
		// Three processes pacing locally at a third of the rate each: in
		// phase they break the limit (the local shares must interleave);
		// on their lattice, one spacing apart, they keep it.
		{"three local buckets in phase", append(append(paced("1", time.Second, 10, 3*spacing, true), paced("2", time.Second, 10, 3*spacing, true)...), paced("3", time.Second, 10, 3*spacing, true)...), 1},
		{"three local buckets on their lattice", append(append(paced("1", time.Second, 10, 3*spacing, true), paced("2", time.Second+spacing, 10, 3*spacing, true)...), paced("3", time.Second+2*spacing, 10, 3*spacing, true)...), 0},
		{"one local bucket at the whole rate beside Redis", append(paced("1", time.Second, 30, spacing, false), paced("2", time.Second+spacing/2, 30, spacing, true)...), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judged(tc.calls, nil, nil)
			if got := kinds(v, VWindow); len(got) != tc.want {
				t.Errorf("window violations = %d, want %d: %v", len(got), tc.want, got)
			}
		})
	}
}

func TestWindowWait(t *testing.T) {
	// A Wait's slot is anywhere in [Lo, Hi]: it counts only in intervals
	// that hold the whole range.
	calls := paced("1", time.Second, 30, time.Second/30, false)
	w := slotCall(KeySliding, "2", time.Second, false)
	w.Kind, w.Slot, w.Exact, w.Lo, w.Hi = "wait", 0, false, at(900*time.Millisecond), at(1100*time.Millisecond)
	if got := kinds(judged(append(calls, w), nil, nil), VWindow); len(got) != 0 {
		t.Errorf("a Wait spanning 200 ms counted in a short interval: %v", got)
	}
	w.Lo, w.Hi = at(time.Second+ms2(1)), at(time.Second+ms2(2))
	if got := kinds(judged(append(calls, w), nil, nil), VWindow); len(got) != 1 {
		t.Errorf("a Wait known to lie between two slots 33 ms apart: %d violations, want 1", len(got))
	}
}

func TestWindowBand(t *testing.T) {
	// win: 36 per 2 s window. Spread over the window, clear of the other
	// bands (rps 20/s, burst 2).
	var calls []Call
	for i := range 36 {
		calls = append(calls, slotCall(KeyPolicy, fmt.Sprint(i%3+1), time.Duration(i)*55*time.Millisecond, false))
	}
	if got := kinds(judged(calls, nil, nil), VWindow); len(got) != 0 {
		t.Fatalf("36 in a window of 36: %v", got)
	}
	calls = append(calls, slotCall(KeyPolicy, "1", 1990*time.Millisecond, false))
	got := kinds(judged(calls, nil, nil), VWindow)
	if len(got) != 1 || !strings.Contains(got[0].Msg, "band win") {
		t.Errorf("37 in a window of 36: %v, want one violation of band win", got)
	}
}

func TestWindowRaises(t *testing.T) {
	// tokens: 2400/s, burst 480. Two calls of 240 at once fill the burst;
	// a raise of the first to 300 is allowed only while it was settled
	// after the second was granted.
	var calls []Call
	for i := range 2 {
		c := slotCall(KeyPolicy, fmt.Sprint(i+1), time.Second, false)
		c.Cost[unitTokens], c.Actual = 240, 240
		c.Grant += int64(i) * int64(time.Millisecond)
		calls = append(calls, c)
	}
	calls[0].Actual = 300
	for _, tc := range []struct {
		name    string
		settled int64
		want    int
	}{
		{"settled after the second's grant", calls[1].Grant + 1, 0},
		{"never settled", 0, 0},
		{"settled before the second was granted", calls[1].Grant - 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var notes []Note
			if tc.settled != 0 {
				notes = append(notes, Note{Type: noteSettle, ID: calls[0].ID, Key: KeyPolicy, At: tc.settled - 1, End: tc.settled})
			}
			if got := kinds(judged(calls, notes, nil), VWindow); len(got) != tc.want {
				t.Errorf("window violations = %d, want %d: %v", len(got), tc.want, got)
			}
		})
	}
}

// localFor is child's switches to local pacing at from and back at to.
func localFor(child string, from, to time.Duration) []Note {
	return []Note{{Type: noteSwitch, Child: child, At: at(from), To: "local"}, {Type: noteSwitch, Child: child, At: at(to), To: "redis"}}
}

func TestPauses(t *testing.T) {
	// Child 1 pauses the key for 1 s at 2 s; a call at 2.5 s is inside.
	pause := Note{Type: notePause, Child: "1", Key: KeySliding, At: at(2 * time.Second), End: at(2*time.Second + ms2(1)), D: int64(time.Second)}
	local := localFor
	for _, tc := range []struct {
		name     string
		call     Call
		notes    []Note
		actions  []Action
		want     int
		unjudged int
	}{
		{"the maker's call", slotCall(KeySliding, "1", 2500*time.Millisecond, false), nil, nil, 1, 0},
		{"another process on Redis", slotCall(KeySliding, "2", 2500*time.Millisecond, false), nil, nil, 1, 0},
		{"before the pause's lead", slotCall(KeySliding, "2", 2*time.Second+ms2(5), false), nil, nil, 0, 0},
		{"after the pause", slotCall(KeySliding, "2", 3*time.Second+ms2(1), false), nil, nil, 0, 0},
		{"another process pacing locally", slotCall(KeySliding, "2", 2500*time.Millisecond, true), local("2", time.Second, 4*time.Second), nil, 0, 1},
		{"the maker pacing locally", slotCall(KeySliding, "1", 2500*time.Millisecond, true), local("1", time.Second, 4*time.Second), nil, 1, 0},
		// The pause ends at 3 s on the process's clock; its local slots are
		// on its estimate of the server's.
		{"a local slot at the pause's end, within slotEps", slotCall(KeySliding, "1", 3*time.Second-100*time.Microsecond, true), local("1", time.Second, 4*time.Second), nil, 0, 0},
		{"a local slot 1 ms before the pause's end", slotCall(KeySliding, "1", 3*time.Second-time.Millisecond, true), local("1", time.Second, 4*time.Second), nil, 1, 0},
		{"a local slot of a process back on Redis", slotCall(KeySliding, "2", 2500*time.Millisecond, true), local("2", time.Second, 2400*time.Millisecond), nil, 1, 0},
		{"made while the maker paced locally", slotCall(KeySliding, "2", 2500*time.Millisecond, false), local("1", time.Second, 4*time.Second), nil, 0, 1},
		// Made locally, handed to Redis as its maker came back at 2.2 s.
		{"made locally, its maker back on Redis", slotCall(KeySliding, "2", 2500*time.Millisecond, false), local("1", time.Second, 2200*time.Millisecond), nil, 1, 0},
		// Its maker came back while a fault still held (a Cluster's probe
		// answered with the key's master frozen: Cluster seed 16): the
		// handback of the key failed, and waits for the maker's next call
		// on it; the other process could not learn the pause.
		{"made locally, its maker back on Redis during a fault", slotCall(KeySliding, "2", 2500*time.Millisecond, false), local("1", time.Second, 2200*time.Millisecond),
			[]Action{{Kind: FaultFreeze, At: at(1500 * time.Millisecond), End: at(2300 * time.Millisecond)}}, 0, 1},
		{"Redis restarted empty since", slotCall(KeySliding, "2", 2500*time.Millisecond, false), nil,
			[]Action{{Kind: FaultRestart, At: at(2200 * time.Millisecond), End: at(2300 * time.Millisecond)}}, 0, 1},
		{"resumed before the slot", slotCall(KeySliding, "2", 2500*time.Millisecond, false), nil,
			[]Action{{Kind: OpResume, Key: KeySliding, At: at(2400 * time.Millisecond), End: at(2401 * time.Millisecond)}}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judged([]Call{tc.call}, append(tc.notes, pause), tc.actions)
			if got := kinds(v, VPause); len(got) != tc.want || v.Figures.Unjudged != tc.unjudged {
				t.Errorf("pause violations = %d (unjudged %d), want %d (%d): %v", len(got), v.Figures.Unjudged, tc.want, tc.unjudged, got)
			}
		})
	}
	// The operator's pause binds every process on Redis.
	op := Action{Kind: OpPause, Key: KeySliding, For: time.Second, At: at(2 * time.Second), End: at(2*time.Second + ms2(1))}
	v := judged([]Call{slotCall(KeySliding, "3", 2500*time.Millisecond, false)}, nil, []Action{op})
	if got := kinds(v, VPause); len(got) != 1 {
		t.Errorf("a call inside the operator's pause: %d violations, want 1", len(got))
	}
}

func TestThroughput(t *testing.T) {
	// Sliding: 30/s judged from the warm-up (2.5 s) to 15.5 s: 390 allowed.
	full := paced("1", warmup, 390, time.Second/30, false)
	for _, tc := range []struct {
		name    string
		calls   []Call
		actions []Action
		want    bool // a violation
	}{
		{"all of it", full, nil, false},
		{"a third of it", paced("1", warmup, 130, time.Second/10, false), nil, true},
		// Stored at 10/s from the warm-up on: a third is all of it.
		{"a third under a stored limit of a third", paced("1", warmup, 130, time.Second/10, false),
			[]Action{{Kind: OpSet, Key: KeySliding, At: at(0), End: at(0), Stored: reserve.Limit{Rate: 10, Burst: 1}.Policy()}}, false},
		// A fault from 3 s to 12 s leaves too little time to judge.
		{"mostly faults", nil, []Action{{Kind: FaultFreeze, At: at(3 * time.Second), End: at(12 * time.Second)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judged(tc.calls, nil, tc.actions)
			var got []Violation
			for _, x := range kinds(v, VThroughput) {
				if x.Key == KeySliding {
					got = append(got, x)
				}
			}
			if (len(got) > 0) != tc.want {
				t.Errorf("throughput violations %v (fraction %v), want a violation: %v", got, v.Figures.Throughput[KeySliding], tc.want)
			}
		})
	}
	// Every process killed from 4 s to 10 s (the combination runner's seed
	// 10 with Python processes: http.example judged 0.40 over 3.1 s, 1.9 s
	// of which nobody ran): half the rate while a process runs is judged
	// on that time alone; with one process left running, the hole counts.
	half := append(paced("1", warmup, 23, time.Second/15, false), paced("1b", 10*time.Second+procGap, 75, time.Second/15, false)...)
	killed := []Life{{ID: "1", From: at(0), To: at(4 * time.Second)}, {ID: "1b", From: at(10 * time.Second), To: at(defaultLength)}}
	for _, tc := range []struct {
		name  string
		lives []Life
		want  bool
	}{
		{"half the rate, every process killed between", killed, false},
		{"half the rate, one process running between", append(killed, Life{ID: "2", From: at(0), To: at(defaultLength)}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &Result{Start: start, End: start.Add(defaultLength), Scenario: Scenario{Length: defaultLength, Procs: procs},
				Calls: half, Lives: tc.lives}
			v := Judge(res)
			checkSlidingThroughput(t, v, tc.want)
		})
	}
}

// checkSlidingThroughput asserts whether v has a throughput violation on
// KeySliding.
func checkSlidingThroughput(t *testing.T, v Verdict, want bool) {
	t.Helper()
	got := 0
	for _, x := range kinds(v, VThroughput) {
		if x.Key == KeySliding {
			got++
		}
	}
	if (got > 0) != want {
		t.Errorf("throughput violations %d (fraction %v, %s), want a violation: %v", got, v.Figures.Throughput[KeySliding], v.Figures.Used[KeySliding], want)
	}
}

func TestEarlyAndErrors(t *testing.T) {
	c := slotCall(KeySliding, "1", time.Second, false)
	c.Fire = c.Slot - int64(reserve.MaxEarly) - 1
	ok := slotCall(KeySliding, "1", 2*time.Second, false)
	ok.Fire = ok.Slot - int64(reserve.MaxEarly)
	notes := []Note{{Type: noteErr, Child: "1", Key: KeySliding, Op: "reserve", At: at(time.Second), Err: "boom"}}
	actions := []Action{
		{Kind: OpUnset, Key: KeySliding, At: at(time.Second), End: at(time.Second), Err: "not stored", Expected: true},
		{Kind: OpSet, Key: KeySliding, At: at(time.Second), End: at(time.Second), Err: "bad policy"},
	}
	v := judged([]Call{c, ok}, notes, actions)
	if got := kinds(v, VEarly); len(got) != 1 {
		t.Errorf("early violations %v, want one (the call fired MaxEarly + 1 ns early)", got)
	}
	if got := kinds(v, VError); len(got) != 2 {
		t.Errorf("error violations %v, want two (the child's error, the operator's unexpected one)", got)
	}
}

// adaptiveCall is a call on KeyAdaptive through pacehttp by child, sent at
// d (its slot in [Lo, Hi]: from 50 ms before to MaxEarly after), arrived
// at d, answered status.
func adaptiveCall(child string, d time.Duration, status int) Call {
	t := at(d)
	c := Call{ID: fmt.Sprintf("%s-%d", child, t), Key: KeyAdaptive, Child: child, Kind: kindAdaptive,
		Grant: t - int64(50*time.Millisecond), Lo: t - int64(50*time.Millisecond), Hi: t + int64(reserve.MaxEarly), Fire: t,
		Arrive: t, Status: status, Cost: map[string]float64{reserve.PermitsUnit: 1}}
	if status == 429 {
		c.Why, c.Retry = "limit", int64(30*time.Millisecond)
	}
	return c
}

// accepted returns calls on KeyAdaptive accepted every 250 ms in [from,
// to), from three children in turn.
func accepted(from, to time.Duration) []Call {
	var out []Call
	for i, d := 0, from; d < to; i, d = i+1, d+250*time.Millisecond {
		out = append(out, adaptiveCall(fmt.Sprint(i%3+1), d, 200))
	}
	return out
}

func TestLearnedSentOnce(t *testing.T) {
	a, b := adaptiveCall("1", 3*time.Second, 200), adaptiveCall("2", 3*time.Second, 200)
	again := a
	again.Arrive += int64(time.Millisecond)
	retry := a
	retry.Attempt, retry.Arrive = 1, retry.Arrive+int64(time.Second) // another attempt: another ID in a run, but judged by both
	unsent := Note{Type: noteUnsent, Child: "2", Key: KeyAdaptive, ID: b.ID, Op: "too-long", At: at(2 * time.Second)}
	for _, tc := range []struct {
		name  string
		calls []Call
		notes []Note
		want  int
	}{
		{"each once", []Call{a, b}, nil, 0},
		{"an attempt after a 429", []Call{a, retry}, nil, 0},
		{"one seen twice", []Call{a, b, again}, nil, 1},
		{"refused before sending, never seen", []Call{a}, []Note{unsent}, 0},
		{"refused before sending, then seen", []Call{a, b}, []Note{unsent}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kinds(judged(tc.calls, tc.notes, nil), VTwice); len(got) != tc.want {
				t.Errorf("%s violations = %d, want %d: %v", VTwice, len(got), tc.want, got)
			}
		})
	}
}

func TestLearnedRates(t *testing.T) {
	sample := func(r float64) Note {
		return Note{Type: noteRate, Child: "1", Key: KeyAdaptive, At: at(3 * time.Second), Rate: r}
	}
	cfg := adaptiveConfig
	for _, tc := range []struct {
		rate float64
		want int
	}{
		{cfg.Min, 0}, {cfg.Start, 0}, {cfg.Max, 0},
		{cfg.Min * 0.99, 1}, {cfg.Max * 1.01, 1}, {math.NaN(), 1},
	} {
		if got := kinds(judged(nil, []Note{sample(tc.rate)}, nil), VRate); len(got) != tc.want {
			t.Errorf("a learned rate of %v/s: %d violations, want %d: %v", tc.rate, len(got), tc.want, got)
		}
	}
}

func TestLearnedLiveness(t *testing.T) {
	// Accepted calls from the warm-up to the end but for a hole [6 s, 9 s).
	holed := append(accepted(warmup, 6*time.Second), accepted(9*time.Second, defaultLength)...)
	holed4 := append(accepted(warmup, 6*time.Second), accepted(10*time.Second, defaultLength)...)
	// A 429 at 5.99 s with a Retry of 30 ms: the Transport pauses the key
	// 1 s (Retry-After in whole seconds), then learnedRecovery.
	refused := adaptiveCall("1", 5990*time.Millisecond, 429)
	pauseNote := Note{Type: notePause, Child: "1", Key: KeyAdaptive, At: at(5995 * time.Millisecond), End: at(5996 * time.Millisecond),
		D: int64(30 * time.Millisecond)}
	opPause := Action{Kind: OpPause, Key: KeyAdaptive, For: 3 * time.Second, At: at(6 * time.Second), End: at(6*time.Second + ms2(1))}
	resume := Action{Kind: OpResume, Key: KeyAdaptive, At: at(6500 * time.Millisecond), End: at(6500*time.Millisecond + ms2(1))}
	fault := Action{Kind: FaultFreeze, At: at(5 * time.Second), End: at(8 * time.Second)}
	for _, tc := range []struct {
		name    string
		calls   []Call
		notes   []Note
		actions []Action
		want    int
	}{
		{"calls all along", accepted(warmup, defaultLength), nil, nil, 0},
		{"a hole of 3 s", holed, nil, nil, 1},
		{"a hole of 1.5 s", append(accepted(warmup, 6*time.Second), accepted(7500*time.Millisecond, defaultLength)...), nil, nil, 0},
		// The hole is 3 s from the 429's arrival; the pause and its
		// recovery leave 1 s of it.
		{"a hole after a 429 the child paused for", append(holed, refused), []Note{pauseNote}, nil, 0},
		{"a hole after a 429 whose answer was lost", append(holed, refused), nil, nil, 0},
		// The operator pauses the key for 3 s at 6 s: with its recovery,
		// a hole of 4 s; resumed at 6.5 s, 2.5 s of the hole are clear.
		{"a hole in the operator's pause", holed4, nil, []Action{opPause}, 0},
		{"a hole after a resume", holed4, nil, []Action{opPause, resume}, 1},
		{"a hole in a fault and its recovery", holed, nil, []Action{fault}, 0},
		{"no call at all", nil, nil, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kinds(judged(tc.calls, tc.notes, tc.actions), VLiveness); len(got) != tc.want {
				t.Errorf("%s violations = %d, want %d: %v", VLiveness, len(got), tc.want, got)
			}
		})
	}
	// Every process killed from 6 s to 9 s (the combination runner's seed
	// 10): nobody called; one process left running: the hole counts.
	killed := []Life{{ID: "1", From: at(0), To: at(6 * time.Second)}, {ID: "1b", From: at(9 * time.Second), To: at(defaultLength)}}
	for _, tc := range []struct {
		name  string
		lives []Life
		want  int
	}{
		{"a hole while every process was killed", killed, 0},
		{"a hole while one process ran", append(killed, Life{ID: "2", From: at(0), To: at(defaultLength)}), 1},
		// The one running was a Python process, which does not call the
		// adaptive key (the combination runner's seed 38).
		{"a hole while only a Python process ran", append(killed, Life{ID: "2", From: at(0), To: at(defaultLength), Python: true}), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &Result{Start: start, End: start.Add(defaultLength), Scenario: Scenario{Length: defaultLength, Procs: procs},
				Calls: holed, Lives: tc.lives}
			if got := kinds(Judge(res), VLiveness); len(got) != tc.want {
				t.Errorf("%s violations = %d, want %d: %v", VLiveness, len(got), tc.want, got)
			}
		})
	}
}

func TestLearnedPauses(t *testing.T) {
	// Child 1 got a 429 and paused the key for 1 s at 2 s; child 2's call,
	// made after the pause and sent inside it, breaks it.
	pause := Note{Type: notePause, Child: "1", Key: KeyAdaptive, At: at(2 * time.Second), End: at(2*time.Second + ms2(1)), D: int64(time.Second)}
	inside := adaptiveCall("2", 2500*time.Millisecond, 200)
	after := adaptiveCall("2", 3*time.Second+ms2(1), 200)
	v := judged([]Call{inside, after}, []Note{pause}, nil)
	if got := kinds(v, VPause); len(got) != 1 || !strings.Contains(got[0].Msg, inside.ID) {
		t.Errorf("pause violations %v, want one, of call %s", got, inside.ID)
	}
}

// TestHTTPSlots: a call through pacehttp brings the slot it was sent on
// (slotHeader, from the child's hook.Sending), and the verdict judges
// KeyHTTP's bucket on those slots: ten calls within 10 ms exceed its 30/s,
// burst 3. Without the slots the same calls are judged on the span from
// each call to its send, and, as such spans open no interval, nothing is
// found: why the slots are sent.
func TestHTTPSlots(t *testing.T) {
	var withSlots, spans []Call
	for i := range 10 {
		d := 5*time.Second + time.Duration(i)*time.Millisecond
		c := Call{ID: fmt.Sprintf("1-%d", i), Key: KeyHTTP, Child: "1", Kind: kindHTTP, Lo: at(d - 300*time.Millisecond),
			Grant: at(d - 300*time.Millisecond), Fire: at(d), Hi: at(d) + int64(reserve.MaxEarly), Arrive: at(d), Status: 200,
			Cost: map[string]float64{unitRequests: 1}}
		spans = append(spans, c)
		h := fmt.Sprintf("%d %t %d %t %d", at(d), true, at(d), false, int64(100+i))
		if !readSlot(&c, h) {
			t.Fatalf("readSlot(%q) failed", h)
		}
		if c.Slot != at(d) || !c.Exact || c.Lo != c.Slot || c.Hi != c.Slot || c.Seq != int64(100+i) || c.Local {
			t.Fatalf("readSlot(%q) gave %+v", h, c)
		}
		withSlots = append(withSlots, c)
	}
	if v := kinds(judged(withSlots, nil, nil), VWindow); len(v) == 0 {
		t.Errorf("ten calls on KeyHTTP's slots within 10 ms: no window violation")
	}
	if v := kinds(judged(spans, nil, nil), VWindow); len(v) != 0 {
		t.Errorf("the same calls without their slots: %d window violations, want none (spans open no interval): %v", len(v), v)
	}
	for _, h := range []string{"", "x", "0 true 0 false 0", "1 true 2"} {
		var c Call
		if readSlot(&c, h) {
			t.Errorf("readSlot(%q) = true, want false", h)
		}
	}
}

// TestThroughputLateBack: a member a Redis fault sent to local pacing that
// comes back late (a loaded machine) is part of the fault's recovery, up
// to lateBack: the throughput is judged from faultRecovery after its
// return; one not back within lateBack is judged from lateBack on.
func TestThroughputLateBack(t *testing.T) {
	oom := []Action{{Kind: FaultOOM, At: at(3 * time.Second), End: at(5 * time.Second)}}
	// The full rate before the fault, half of it from 11 s on.
	calls := append(paced("1", warmup, 15, time.Second/30, false), paced("1", 11*time.Second, 67, time.Second/15, false)...)
	sw := func(d time.Duration, to string) Note { return Note{Type: noteSwitch, Child: "1", At: at(d), To: to} }
	for _, tc := range []struct {
		name  string
		notes []Note
		want  bool // a violation
	}{
		// Judged from 7 s: 4 s without calls.
		{"back at the fault's end", []Note{sw(3100*time.Millisecond, "local"), sw(5100*time.Millisecond, "redis")}, true},
		// Judged from 11 s.
		{"back 4 s late", []Note{sw(3100*time.Millisecond, "local"), sw(9*time.Second, "redis")}, false},
		// Judged from 12 s (5 s + lateBack + faultRecovery) with the
		// member local: no call from 3 s to 11 s would have been judged
		// from 7 s; here the calls from 11 s are half the rate over 3.5 s
		// plus the 0.5 s before the fault.
		{"never back", []Note{sw(3100*time.Millisecond, "local")}, false},
		// Back during the fault: no later start.
		{"back during the fault", []Note{sw(3100*time.Millisecond, "local"), sw(4*time.Second, "redis")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judged(calls, tc.notes, oom)
			checkSlidingThroughput(t, v, tc.want)
		})
	}
	// A member local at the end that never comes back: the check still
	// judges the time from lateBack on, and finds no calls there.
	v := judged(paced("1", warmup, 15, time.Second/30, false), []Note{sw(3100*time.Millisecond, "local")}, oom)
	if len(kinds(v, VThroughput)) == 0 {
		t.Errorf("no throughput violation for a fleet that stopped calling, fraction %v", v.Figures.Throughput[KeySliding])
	}
}

// TestThroughputResumedWindowQueue: after an operator's resume, a key with
// a window band may carry nothing until resume.lua's move lets it: the
// queue granted during the pause (and every call behind it) goes by whole
// windows into the windows after the one holding the latest slot granted
// before the pause, when the queue may reach past the window the pause
// ends in. The combination runner's seed 28: a pause of 11.7 s at 2.79 s
// resumed at 3.62 s, the policy key's 2 s window band holding slots from
// before the pause in the resume's window, the queue moved by 8 s to 6.56
// s (0.06 s after the pause's end less four windows), the key idle from the
// resume until then; judged from 3.82 s at 0.26 of what the limit allowed.
// The check judges from the move's latest restart on (pauseRecovery after
// it), and still finds a key that carries little after it.
func TestThroughputResumedWindowQueue(t *testing.T) {
	// Windows of 2 s from the run's start: the pre-pause slots lie in
	// [2 s, 4 s), the pause made at 2.6 s for 11.3 s ends at 13.9 s, in
	// [12 s, 14 s), and the resume at 2.9 s moves the queue by four
	// windows at most (into [4 s, 6 s), not [2 s, 4 s)): the key may carry
	// nothing until 5.9 s.
	pause := Action{Kind: OpPause, Key: KeyPolicy, At: at(2600 * time.Millisecond), End: at(2605 * time.Millisecond), For: 11300 * time.Millisecond}
	resume := Action{Kind: OpResume, Key: KeyPolicy, At: at(2900 * time.Millisecond), End: at(2905 * time.Millisecond)}
	freeze := func(from time.Duration) Action {
		return Action{Kind: FaultFreeze, At: at(from), End: at(defaultLength)}
	}
	policyCalls := func(from, to time.Duration, every time.Duration) []Call {
		var out []Call
		for d := from; d < to; d += every {
			out = append(out, slotCall(KeyPolicy, "1", d, false))
		}
		return out
	}
	// The rate (20/s) before the pause, the pre-pause queue's last slot at
	// 2.7 s (asked for before the pause), the moved queue from 5.95 s.
	before := policyCalls(warmup, 2700*time.Millisecond, 50*time.Millisecond)
	for _, tc := range []struct {
		name  string
		calls []Call
		fault Action
		want  bool // a violation
	}{
		// Judged before from 3.1 s to 7 s: 0.32 of the limit. The
		// move's restart leaves 0.9 s from 6.1 s: too little to judge.
		{"the queue held to the window after the pre-pause one", append(before, policyCalls(5950*time.Millisecond, 7*time.Second, 50*time.Millisecond)...),
			freeze(7 * time.Second), false},
		// From 6.1 s to 9.5 s, the key at a quarter of the rate: judged.
		{"a quarter of the rate after the move's restart", append(before, policyCalls(5950*time.Millisecond, 9500*time.Millisecond, 200*time.Millisecond)...),
			freeze(9500 * time.Millisecond), true},
		// The same at the rate: no violation.
		{"the rate after the move's restart", append(before, policyCalls(5950*time.Millisecond, 9500*time.Millisecond, 50*time.Millisecond)...),
			freeze(9500 * time.Millisecond), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judged(tc.calls, nil, []Action{pause, resume, tc.fault})
			got := 0
			for _, x := range kinds(v, VThroughput) {
				if x.Key == KeyPolicy {
					got++
				}
			}
			if (got > 0) != tc.want {
				t.Errorf("throughput violations %d (fraction %v, %s), want a violation: %v", got, v.Figures.Throughput[KeyPolicy], v.Figures.Used[KeyPolicy], tc.want)
			}
		})
	}
}

// TestThroughputHTTPRetryAfter: a 429 on KeyHTTP tells pacehttp's
// Transport its Retry-After in whole seconds (the provider rounds up), and
// the Transport pauses the key for all of it, while the child's own pause
// is the exact Retry: the time up to the whole seconds is no idle time to
// judge. Before, the combination runner on a Cluster (seed 30) judged the
// 0.85 s between a Retry of 1.15 s and its Retry-After of 2 s as the
// fleet's, and found http.example at 0.38 of its limit.
func TestThroughputHTTPRetryAfter(t *testing.T) {
	refused := Call{ID: "1-1", Key: KeyHTTP, Child: "1", Kind: kindHTTP, Lo: at(9 * time.Second), Hi: at(9 * time.Second),
		Arrive: at(9 * time.Second), Status: 429, Why: "announced", Retry: int64(1150 * time.Millisecond),
		Cost: map[string]float64{unitRequests: 1}}
	pause := Note{Type: notePause, Child: "1", Key: KeyHTTP, At: at(9*time.Second + ms2(2)), End: at(9*time.Second + ms2(3)), D: int64(1150 * time.Millisecond)}
	for _, tc := range []struct {
		body string
		to   time.Duration // the Transport's pause ends then
	}{
		{"", 11 * time.Second},                  // Retry-After: 2
		{bodyGoogle, 10*time.Second + ms2(152)}, // the body's RetryInfo alone: the note's pause
	} {
		res := &Result{Start: start, End: start.Add(defaultLength), Scenario: Scenario{Length: defaultLength, Procs: procs, Body: tc.body},
			Calls: []Call{refused}, Notes: []Note{pause}}
		for _, s := range index(res).judgedTime(KeyHTTP) {
			if s[0] < at(tc.to+pauseRecovery) && s[1] > pause.At {
				t.Errorf("body %q: judged [%v, %v], inside the Transport's pause from 9.002 s to %v and its recovery",
					tc.body, time.Duration(s[0]-at(0)), time.Duration(s[1]-at(0)), tc.to)
			}
		}
	}
}

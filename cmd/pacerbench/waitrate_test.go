package main

import (
	"slices"
	"strings"
	"testing"
)

// TestQuickTuning: PACERBENCH_WAITRATE_QUICK names the quick-start
// client's changes, each row says which, and a wrong value is an error
// naming the variable.
func TestQuickTuning(t *testing.T) {
	for _, c := range []struct {
		env   string
		want  quickTune
		label string
	}{
		{"", quickTune{}, "pacer, quick-start client"},
		{"pool", quickTune{pool: true}, "pacer, quick-start client, pool sized"},
		{"idle", quickTune{idle: true}, "pacer, quick-start client, MinIdleConns"},
		{"pool, idle", quickTune{pool: true, idle: true}, "pacer, quick-start client, pool sized, MinIdleConns"},
		{"idle,pool", quickTune{pool: true, idle: true}, "pacer, quick-start client, pool sized, MinIdleConns"},
	} {
		t.Setenv(waitQuickEnv, c.env)
		got, err := quickTuning()
		if err != nil || got != c.want {
			t.Errorf("%s=%q: %+v, err %v; want %+v, nil", waitQuickEnv, c.env, got, err, c.want)
		}
		if got := quickLabel(got); got != c.label {
			t.Errorf("%s=%q: label %q, want %q", waitQuickEnv, c.env, got, c.label)
		}
	}
	// "dial" opened the caller's connections, which pacer's copy of the
	// client never uses: refused, saying so.
	t.Setenv(waitQuickEnv, "pool,dial")
	if got, err := quickTuning(); err == nil || !strings.Contains(err.Error(), "copy") || got != (quickTune{}) {
		t.Errorf("%s=pool,dial: %+v, err %v; want an error saying pacer uses its own copy", waitQuickEnv, got, err)
	}
	for _, bad := range []string{"pools", "pool,", "tuned", " ", "dial"} {
		t.Setenv(waitQuickEnv, bad)
		if got, err := quickTuning(); err == nil || !strings.Contains(err.Error(), waitQuickEnv) || got != (quickTune{}) {
			t.Errorf("%s=%q: %+v, err %v; want an error naming the variable", waitQuickEnv, bad, got, err)
		}
	}
}

// TestWaitTurns: PACERBENCH_WAITRATE_TURNS is a whole number of turns
// from 1 to maxWaitTurns, 1 unset; anything else is an error naming the
// variable. The turns alternate which client runs first.
func TestWaitTurns(t *testing.T) {
	for env, want := range map[string]int{"": 1, "1": 1, "4": 4, " 7 ": 7, "50": maxWaitTurns} {
		t.Setenv(waitTurnsEnv, env)
		if got, err := waitTurns(); err != nil || got != want {
			t.Errorf("%s=%q: %d, err %v; want %d", waitTurnsEnv, env, got, err, want)
		}
	}
	for _, bad := range []string{"0", "-1", "51", "2.5", "two", " ", "1e3"} {
		t.Setenv(waitTurnsEnv, bad)
		if got, err := waitTurns(); err == nil || !strings.Contains(err.Error(), waitTurnsEnv) || got != 0 {
			t.Errorf("%s=%q: %d, err %v; want an error naming the variable", waitTurnsEnv, bad, got, err)
		}
	}
	var order []bool
	for turn := range 4 {
		order = append(order, quickFirst(turn))
	}
	if want := []bool{false, true, false, true}; !slices.Equal(order, want) {
		t.Errorf("quick-start first by turn: %v, want %v", order, want)
	}
}

// TestTurnGaps: the summary of a phase in turns gives, per rate, the tuned
// client's share less the quick-start client's in each turn, in the
// turns' order whatever the rows' order, their median, and how many the
// tuned client led; the floor's rows, a run of one turn, and a turn
// missing a client are left out.
func TestTurnGaps(t *testing.T) {
	row := func(rate float64, variant string, turn int, perSecond float64) waitRow {
		return waitRow{Rate: rate, Variant: variant, Turn: turn, Run: leaseRun{Admissions: int64(perSecond * 2), Seconds: 2}}
	}
	rows := []waitRow{
		row(200000, "pacer", 1, 190000), row(200000, "quick", 1, 186000), // 2.0
		row(200000, "quick", 2, 192000), row(200000, "pacer", 2, 191000), // -0.5
		row(200000, "pacer", 3, 196000), row(200000, "quick", 3, 190000), // 3.0
		{Rate: 200000, Variant: "x/time/rate, one process (the floor)", Floor: true, Run: leaseRun{Admissions: 400000, Seconds: 2}},
		row(50000, "pacer", 2, 49000), row(50000, "quick", 2, 48500), // 1.0
		row(50000, "quick", 1, 48000), row(50000, "pacer", 1, 49500), // 3.0
		row(50000, "pacer", 3, 49000),                           // no quick-start run
		row(1000, "pacer", 0, 1000), row(1000, "quick", 0, 900), // one turn: no summary
	}
	got := turnGaps(rows, "pacer", "quick")
	want := []string{
		"At 200000/s, the tuned client's share of the rate less the quick-start client's, by turn (the quick-start client first in turns 2, 4, ...): 2.0, -0.5, 3.0 points; median 2.0; tuned ahead in 2 of 3.",
		"At 50000/s, the tuned client's share of the rate less the quick-start client's, by turn (the quick-start client first in turns 2, 4, ...): 3.0, 1.0 points; median 2.0; tuned ahead in 2 of 2.",
	}
	if !slices.Equal(got, want) {
		t.Errorf("turnGaps:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

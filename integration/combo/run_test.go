package combo

import (
	"testing"
	"time"
)

// TestProlongsRestart: a fault that keeps the fleet's records from
// answering, begun within the restart's gap, moves the gap to its end (the
// members pacing locally could not come back during it); a fault of
// another master, of another kind, or begun after the gap does not.
func TestProlongsRestart(t *testing.T) {
	healed := time.Unix(1_000_000, 0)
	r := &runner{res: &Result{Placement: map[string]int{fleetRecords: 3}}}
	cases := []struct {
		name  string
		e     Event
		at    time.Duration // after the restart's heal
		want  bool
		fresh bool // no restart healed yet
	}{
		{"a pause of the fleet's master at once", Event{Kind: FaultCPause, Node: 3}, 1 * time.Millisecond, true, false},
		{"a freeze of it within the gap", Event{Kind: FaultFreeze, Node: 3}, restartGap - time.Millisecond, true, false},
		{"out of memory on it", Event{Kind: FaultOOM, Node: 3}, 0, true, false},
		{"on one server", Event{Kind: FaultCPause}, 0, true, false},
		{"a pause after the gap", Event{Kind: FaultCPause, Node: 3}, restartGap, false, false},
		{"a pause of another master", Event{Kind: FaultCPause, Node: 1}, 0, false, false},
		{"slow replies", Event{Kind: FaultSlow, Node: 3}, 0, false, false},
		{"no restart before", Event{Kind: FaultCPause, Node: 3}, 0, false, true},
	}
	for _, c := range cases {
		r.healed = healed
		if c.fresh {
			r.healed = time.Time{}
		}
		if got := r.prolongsRestart(c.e, healed.Add(c.at)); got != c.want {
			t.Errorf("%s: prolongsRestart %v, want %v", c.name, got, c.want)
		}
	}
}

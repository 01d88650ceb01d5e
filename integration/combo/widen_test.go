package combo

import (
	"testing"
	"time"
)

// The wider judgments on made-up runs: each can fail, and none fails on
// what the library rightly does.

func TestUnavailable(t *testing.T) {
	unavail := func(child string, d time.Duration) Note {
		return Note{Type: noteUnavail, Child: child, Key: KeySliding, Op: "wait", At: at(d), Err: "reserve: redis unavailable: no share"}
	}
	for _, tc := range []struct {
		name  string
		notes []Note
		want  int
	}{
		{"none", nil, 0},
		{"one", []Note{unavail("1", 3*time.Second)}, 1},
		{"a run of them", []Note{unavail("1", 3*time.Second), unavail("1", 3500*time.Millisecond), unavail("1", 4*time.Second)}, 1},
		{"two runs", []Note{unavail("1", 3*time.Second), unavail("1", 5*time.Second)}, 2},
		{"two processes", []Note{unavail("1", 3*time.Second), unavail("2", 3*time.Second)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kinds(judged(nil, tc.notes, nil), VUnavailable); len(got) != tc.want {
				t.Errorf("%s violations = %d, want %d: %v", VUnavailable, len(got), tc.want, got)
			}
		})
	}
}

func TestSwitches(t *testing.T) {
	local := func(d time.Duration) Note { return Note{Type: noteSwitch, Child: "1", At: at(d), To: "local"} }
	freeze := Action{Kind: FaultFreeze, At: at(4 * time.Second), End: at(6 * time.Second)}
	hog := Action{Kind: FaultHog, At: at(4 * time.Second), End: at(8 * time.Second), For: 4 * time.Second}
	for _, tc := range []struct {
		name    string
		notes   []Note
		actions []Action
		want    int
	}{
		{"with Redis healthy", []Note{local(5 * time.Second)}, nil, 1},
		{"in a Redis fault", []Note{local(5 * time.Second)}, []Action{freeze}, 0},
		{"just after a fault was mended", []Note{local(6500 * time.Millisecond)}, []Action{freeze}, 0},
		{"well after a fault was mended", []Note{local(7500 * time.Millisecond)}, []Action{freeze}, 1},
		{"beside CPU hogs", []Note{local(5 * time.Second)}, []Action{hog}, 1},
		{"back to Redis", []Note{{Type: noteSwitch, Child: "1", At: at(5 * time.Second), To: "redis"}}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kinds(judged(nil, tc.notes, tc.actions), VSwitch); len(got) != tc.want {
				t.Errorf("%s violations = %d, want %d: %v", VSwitch, len(got), tc.want, got)
			}
		})
	}
}

func TestCanWait(t *testing.T) {
	for _, kind := range []string{"wait", "waitp", "reserve", "reservep", "cancel", "cancelp", kindHTTP, kindAdaptive} {
		if !canWait(kind) {
			t.Errorf("canWait(%q) = false, want true", kind)
		}
	}
	for _, kind := range []string{"try", "tryp", "allow", "allowp"} {
		if canWait(kind) {
			t.Errorf("canWait(%q) = true, want false (it asked for a maximum wait)", kind)
		}
	}
}

package layout

import "testing"

// TestPauseEnd: a state's pause, as sleepers read it. A state written with
// no pause in force must read as none: reading the write time as the end of
// a pause made sleepers that checked a little late (several on one window's
// first slot, under load) give up their slots for fresh ones, and the
// windows lost those slots (issue 21, finding 10: 26, 22, 30 and 19 calls
// in windows of 30, with no pause ever made).
func TestPauseEnd(t *testing.T) {
	const tus = 1795436253625771
	for _, tt := range []struct {
		state string
		want  int64
	}{
		{"1795436253625771 2100 7 0 0 0", 0},                     // format 2, never paused
		{"1795436253625771 2100 7 c0 rps 1 2", 0},                // with a stored limit
		{"1795436253625771 2100 7 417 0 0", 0},                   // a client clock's ns beyond the write's µs: no pause
		{"1795436253625771 2100 7 -3000000 0 0", 0},              // a pause that ended before the write
		{"1795436253625771 2100 7 c1500.5 0 0", tus*1000 + 1501}, // in force: ends 1.5005 µs after the write
		{"1795436253625771 2100 7 2000000000 0 0", tus*1000 + 2e9},
		{"1 1795436253625771 2100000 7 0.000 0", 0}, // format 1
		{"1 1795436253625771 2100000 7 5000.000 0", tus*1000 + 5000},
		{"keep", 0},
	} {
		if got := PauseEnd(tt.state); got != tt.want {
			t.Errorf("PauseEnd(%q) = %d, want %d", tt.state, got, tt.want)
		}
	}
}

func TestQueue(t *testing.T) {
	for _, tt := range []struct {
		state string
		want  int64
	}{
		{"1795436253625771 2100 7 0 -999999722 278", 0},                                    // a Limit, not queued
		{"1795436253625771 2100 7 0 250000000 250000000", 250_000_000},                     // a Limit queued 250 ms
		{"1795436253625771 2100 7 c0 rps 5.5 1 day w12 3 tokens 900000000 2", 900_000_000}, // the latest bucket
		{"1795436253625771 2100 7 0 day w99999999999 3", 0},                                // windows are not queues
		{"1 1795436253625771 2100000 7 0.000 0 rps 1000.000 1.000 day 12 3", 1000},         // format 1
		{"keep", 0},
	} {
		if got := Queue(tt.state); got != tt.want {
			t.Errorf("Queue(%q) = %d, want %d", tt.state, got, tt.want)
		}
	}
}

// TestLastEventAndTime: the latest slot a state's buckets record, and its
// write time, as the local fallback's horizon and the keys' states read
// them.
func TestLastEventAndTime(t *testing.T) {
	for _, tt := range []struct {
		state    string
		last, tm int64
	}{
		{"1795436253625771 2100 7 0 -999999722 278", 1795436253625771*1000 + 278, 1795436253625771},
		{"1795436253625771 2100 7 0 250000000 250000000", 1795436253625771*1000 + 250_000_000, 1795436253625771},
		{"1795436253625771 2100 7 c0 rps 5.5 1 day w12 3 tokens 900000000 2", 1795436253625771*1000 + 2, 1795436253625771},
		{"1795436253625771 2100 7 0 day w99999999999 3", 0, 1795436253625771},
		{"1 1795436253625771 2100000 7 0.000 0 rps 1000.000 1.000 day 12 3", 1795436253625771*1000 + 1, 1795436253625771},
		{"keep", 0, 0},
		{"", 0, 0},
	} {
		if got := LastEvent(tt.state); got != tt.last {
			t.Errorf("LastEvent(%q) = %d, want %d", tt.state, got, tt.last)
		}
		if got := StateTime(tt.state); got != tt.tm {
			t.Errorf("StateTime(%q) = %d, want %d", tt.state, got, tt.tm)
		}
		if _, seq := StateHead(tt.state); tt.tm != 0 && seq != 7 {
			t.Errorf("StateHead(%q) seq = %d, want 7", tt.state, seq)
		}
	}
}

package reserve

import (
	"testing"
	"time"
)

// TestMaxLatenessEndsWithTheWindow: how late a sleeper may wake and still
// use its slot (Reservation.maxLateness) is half the spacing of the
// fastest bucket its cost charges, at least 1 ms, and never past the end
// of a window its cost charges: a sleeper woken after that end would fire
// in the next window, on top of the units the fleet was granted there.
// With no bucket charged the window's end alone bounds it. The Python
// client's test_max_lateness_ends_with_the_window holds its own to the same
// cases.
func TestMaxLatenessEndsWithTheWindow(t *testing.T) {
	origin := time.Unix(1_800_000_000, 0)
	second := Window{N: 10, Length: time.Second, Origin: origin}
	for _, c := range []struct {
		name   string
		policy Policy
		cost   Cost
		at     time.Time
		want   time.Duration
	}{
		{"a bucket alone: half its spacing", Policy{{Name: "rps", Unit: "requests", Limit: Limit{Rate: 10, Burst: 1}}},
			Cost{"requests": 1}, origin.Add(100 * time.Millisecond), 50 * time.Millisecond},
		{"a fast bucket: at least 1 ms", Policy{{Name: "rps", Unit: "requests", Limit: Limit{Rate: 100_000, Burst: 1}}},
			Cost{"requests": 1}, origin, time.Millisecond},
		{"a window that ends first", Policy{{Name: "rps", Unit: "requests", Limit: Limit{Rate: 10, Burst: 1}}, {Name: "sec", Unit: "requests", Window: second}},
			Cost{"requests": 1}, origin.Add(999_700 * time.Microsecond), 300 * time.Microsecond},
		{"a window that ends later", Policy{{Name: "rps", Unit: "requests", Limit: Limit{Rate: 10, Burst: 1}}, {Name: "sec", Unit: "requests", Window: second}},
			Cost{"requests": 1}, origin.Add(100 * time.Millisecond), 50 * time.Millisecond},
		{"a window alone", Policy{{Name: "sec", Unit: "requests", Window: second}},
			Cost{"requests": 1}, origin.Add(250 * time.Millisecond), 750 * time.Millisecond},
		{"a window the cost does not charge", Policy{{Name: "rps", Unit: "requests", Limit: Limit{Rate: 10, Burst: 1}}, {Name: "tok", Unit: "tokens", Window: second}},
			Cost{"requests": 1, "tokens": 0}, origin.Add(999_700 * time.Microsecond), 50 * time.Millisecond},
		{"a calendar day", Policy{{Name: "daily", Unit: "requests", Window: Window{N: 100, Calendar: Day}}},
			Cost{"requests": 1}, time.Date(2026, 12, 4, 23, 59, 59, 500_000_000, time.UTC), 500 * time.Millisecond},
	} {
		s, err := c.policy.compile()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		amounts, err := s.costs(c.cost)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := &Reservation{lim: &Limiter{}, spec: s, amounts: amounts, at: c.at}
		if got := r.maxLateness(); got != c.want {
			t.Errorf("%s: maxLateness %v, want %v", c.name, got, c.want)
		}
	}
}

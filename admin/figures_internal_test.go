package admin

import (
	"fmt"
	"math"
	"testing"
)

// TestSharesAddUp: a lane's tenants' shares add up to 1 whatever the
// instant the figures are read at, also one before the lane's last
// booking (Status reads TIME before the fair hash).
func TestSharesAddUp(t *testing.T) {
	const tau = 10e6 // µs, as lua/fair.lua
	// Tenant a booked 2 at 0 µs, b booked 1 at 20,000 µs: the lane's total
	// is a's decayed to 20,000 plus b's, recorded at 20,000.
	total := 2*math.Exp(-20000/tau) + 1
	h := map[string]string{
		"b1":   fmt.Sprintf("%.17g %.17g", total, 20000.0),
		"b1 a": fmt.Sprintf("%.17g %.17g", 2.0, 0.0),
		"b1 b": fmt.Sprintf("%.17g %.17g", 1.0, 20000.0),
	}
	for _, now := range []float64{30000, 20000, 10000, 0} {
		ts := addFigures(nil, h, "1", "urgent", now)
		var sum float64
		for _, s := range ts {
			sum += s.Share
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Errorf("read at %v µs: the shares %+v add up to %v; want 1", now, ts, sum)
		}
	}
}

package outage

import (
	"testing"
	"time"
)

// TestFirstLocalSlot pins the defaults' figures that docs/design.md gives:
// 5.7 s with the default call timeout, 9.2 s when it has grown to its cap.
func TestFirstLocalSlot(t *testing.T) {
	for _, c := range []struct {
		now, callTimeout, interval, want time.Duration
	}{
		{DefaultCallTimeout, DefaultCallTimeout, DefaultHeartbeatInterval, 5700 * time.Millisecond},
		{MaxCallTimeout, DefaultCallTimeout, DefaultHeartbeatInterval, 9200 * time.Millisecond},
		{time.Second, time.Second, 2 * time.Second, 2*time.Second + 8*time.Second + 6400*time.Millisecond},
	} {
		if got := FirstLocalSlot(c.now, c.callTimeout, c.interval); got != c.want {
			t.Errorf("FirstLocalSlot(%v, %v, %v) = %v, want %v", c.now, c.callTimeout, c.interval, got, c.want)
		}
	}
}

package reserve

import "time"

// Clock tells the time. A Limiter with no Clock uses Redis server time for
// its keys and the local clock (time.Now) for sleeping; with a Clock, the Clock's Now is
// used for both and passed to the scripts.
type Clock interface {
	Now() time.Time
}

// systemClockValue is time.Now as a Clock: the default.
var systemClockValue Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

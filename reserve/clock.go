package reserve

import "time"

// Clock tells the time. A Limiter with no Clock uses Redis server time for
// its keys and SystemClock for sleeping; with a Clock, the Clock's Now is
// used for both and passed to the scripts.
type Clock interface {
	Now() time.Time
}

// SystemClock is time.Now as a Clock.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

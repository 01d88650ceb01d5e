package hook

// SeatsAsleep marks the seats r (a *reserve.Reservation) holds on an
// in-flight band as not open yet: the caller sleeps until a slot before it
// opens its call, and r's Sleep, called then, opens them. Until then the
// Limiter's renews do not record them again if Redis dropped them (see
// reserve's seatTicket.unopened). Package worker, which takes a task's
// seat before it sleeps to the task's slot, calls it.
var SeatsAsleep func(r any)

// LateForSlot reports whether r (a *reserve.Reservation), slept to its
// slot, is now later after it than the slot may be used
// (Options.MaxLateness) and has not moved for lateness yet: a Sleep now
// takes a fresh slot, as for a sleeper that woke that late. pacehttp's
// Transport and package worker sleep to the rate slot before the seats'
// last check, which may wait for seats again; then they sleep again.
var LateForSlot func(r any) bool

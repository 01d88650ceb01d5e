package hook

// SeatsAsleep marks the seats r (a *reserve.Reservation) holds on an
// in-flight band as not open yet: the caller sleeps until a slot before it
// opens its call, and r's Sleep, called then, opens them. Until then the
// Limiter's renews do not record them again if Redis dropped them (see
// reserve's seatTicket.unopened). Package worker, which takes a task's
// seat before it sleeps to the task's slot, calls it.
var SeatsAsleep func(r any)

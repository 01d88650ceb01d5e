package hook

import "time"

// CalendarArg returns the calendar tables of policy (a reserve.Policy)
// around now, as the scripts' ARGV[3] prefix a call of that policy sends
// ("c<tables> ", "" when it has no calendar window): what package admin's
// reads of a key (Queue) send, so that they see the key as the fleet's
// calls do.
var CalendarArg func(policy any, now time.Time) (string, error)

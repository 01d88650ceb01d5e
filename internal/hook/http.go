package hook

import "net/http"

// Sending, if set, is called by pacehttp's Transport with each request it
// is about to send (the one its Base receives, after the slot's sleep) and
// the *reserve.Reservation the request is sent on. It is for the tests that
// judge pacehttp's slots exactly (the combination runner); a program that
// does not set it pays one nil check per request. It must not change req.
var Sending func(req *http.Request, r any)

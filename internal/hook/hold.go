package hook

import (
	"context"
	"time"
)

// The mechanism of package hold stays in package reserve (reserve/held.go):
// a held slot is granted by the same script call as the bucket's, and the
// Reservation it makes remembers its holder (its Cancel drops the hold).
// These two hooks are the whole of it; package hold is the API.

// Claim hands holder id its slot on req's key (hold.Book.Claim and
// TryClaim): l is a *reserve.Limiter, req a reserve.Request; r is the
// *reserve.Reservation (nil with an error, a *reserve.WaitTooLongError
// for a refused claim), source a hold.Source. staleAfter 0 is the default.
var Claim func(l any, ctx context.Context, id string, req any, maxWait, staleAfter, early time.Duration, mayKeep bool) (r any, kept bool, source int, err error)

// Hold reserves and keeps a slot for each of reqs (a []reserve.Request),
// for ids[i] (hold.Book.Hold): rs are *reserve.Reservation, sources
// hold.Source, one per request. staleAfter 0 is the default.
var Hold func(l any, ctx context.Context, ids []string, reqs any, staleAfter, notBefore time.Duration) (rs []any, sources []int, err error)

// Package hook lets the packages built on reserve (hold, adaptive) reach the
// Limiter's path to Redis without widening reserve's API, as grpc's
// internal package does for its transport and credentials.
//
// Package reserve sets each hook in an init function; the packages built on
// it call them. A hook's parameters typed any are reserve's own types
// (*reserve.Limiter, reserve.Request, *reserve.Reservation), which this
// package cannot name: reserve imports it. Each hook's doc says which. A
// hook is nil only if reserve is not linked in, which a package that imports
// reserve cannot see.
//
// One hook goes the other way: Sending, which pacehttp calls and only tests
// set, to see the slot each request is sent on.
package hook
